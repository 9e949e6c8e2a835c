package tikvserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	"github.com/pingcap/kvproto/pkg/pdpb"
	"github.com/pingcap/kvproto/pkg/tikvpb"
	tikverr "github.com/tikv/client-go/v2/error"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/storage"
)

// put commits key=value in a transaction of its own.
func put(ctx context.Context, e storage.Engine, key, value string) error {
	tx, err := e.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Set([]byte(key), []byte(value)); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit(ctx)
}

func get(ctx context.Context, e storage.Engine, key string) (string, error) {
	tx, err := e.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	v, err := tx.Get([]byte(key))
	return string(v), err
}

// TestRestartKeepsData restarts the server under an open engine: client-go
// reconnects on its own (PD, the TSO stream, BatchCommands), a write begun
// while the server is down succeeds once it is back, and what was written
// before is still there.
func TestRestartKeepsData(t *testing.T) {
	s := start(t, Options{})
	e := open(t, s)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 3 {
		key := fmt.Sprintf("before%d", round)
		if err := put(ctx, e, key, "v"); err != nil {
			t.Fatalf("round %d: put before the restart: %v", round, err)
		}
		// Write while the server is down: the write waits it out.
		restarted := make(chan error, 1)
		go func() { restarted <- s.Restart(300 * time.Millisecond) }()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := put(ctx, e, fmt.Sprintf("during%d", round), "v"); err != nil {
			t.Fatalf("round %d: put during the restart: %v", round, err)
		}
		t.Logf("round %d: a write begun during the restart took %v", round, time.Since(start).Round(time.Millisecond))
		if err := <-restarted; err != nil {
			t.Fatalf("Restart: %v", err)
		}
		if v, err := get(ctx, e, key); err != nil || v != "v" {
			t.Fatalf("round %d: get %s = %q, %v; want v", round, key, v, err)
		}
	}
	checkImplemented(t, s)
}

// syncBuffer is a log destination tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestUnimplementedIsAnsweredAndLogged calls what the server does not
// implement — a method of a registered service, a service it does not
// know, and a BatchCommands entry — and expects Unimplemented and a log
// line naming each.
func TestUnimplementedIsAnsweredAndLogged(t *testing.T) {
	var logs syncBuffer
	s := start(t, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := tikvpb.NewTikvClient(conn)

	_, err = kv.KvGC(ctx, &kvrpcpb.GCRequest{})
	wantUnimplemented(t, "KvGC", err, &logs, "/tikvpb.Tikv/KvGC")

	err = conn.Invoke(ctx, "/routerpb.Router/GetRegion", &kvrpcpb.GCRequest{}, &kvrpcpb.GCResponse{})
	wantUnimplemented(t, "an unknown service", err, &logs, "/routerpb.Router/GetRegion")

	stream, err := kv.BatchCommands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&tikvpb.BatchCommandsRequest{
		Requests:   []*tikvpb.BatchCommandsRequest_Request{{Cmd: &tikvpb.BatchCommandsRequest_Request_RawGet{RawGet: &kvrpcpb.RawGetRequest{}}}},
		RequestIds: []uint64{1},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	wantUnimplemented(t, "a RawGet batch entry", err, &logs, "BatchCommands/RawGet")
}

func wantUnimplemented(t *testing.T, what string, err error, logs *syncBuffer, method string) {
	t.Helper()
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("%s: %v; want Unimplemented", what, err)
	}
	if !strings.Contains(logs.String(), "method="+method+" ") {
		t.Errorf("%s: no log line names %s; log:\n%s", what, method, logs.String())
	}
}

// TestNewProcessIsANewCluster replaces a server by a new one on the same
// address, as a restarted process would be: requests naming the old
// cluster are refused, PD's with the message on which client-go stops
// its process (as it does against a PD of another cluster), TiKV's with
// StoreNotMatch, instead of reading the new, empty store as the old.
func TestNewProcessIsANewCluster(t *testing.T) {
	old, err := Start("127.0.0.1:0", Options{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, oldID := old.Addr(), old.clusterID
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Start(addr, Options{Log: testLog(t)})
	if err != nil {
		t.Fatalf("Start on %s again: %v", addr, err)
	}
	defer s.Close()
	if s.clusterID == oldID {
		t.Fatal("the new server has the old one's cluster ID")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = pdpb.NewPDClient(conn).GetRegion(ctx, &pdpb.GetRegionRequest{Header: &pdpb.RequestHeader{ClusterId: oldID}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tikverr.MismatchClusterID) {
		t.Errorf("GetRegion naming the old cluster: %v; want FailedPrecondition, %q", err, tikverr.MismatchClusterID)
	}
	resp, err := tikvpb.NewTikvClient(conn).KvGet(ctx, &kvrpcpb.GetRequest{
		Context: &kvrpcpb.Context{ClusterId: oldID, RegionId: 1}, Key: []byte("k"), Version: 1,
	})
	if err != nil || resp.GetRegionError().GetStoreNotMatch() == nil {
		t.Errorf("KvGet naming the old cluster = %v, %v; want StoreNotMatch", resp, err)
	}
}
