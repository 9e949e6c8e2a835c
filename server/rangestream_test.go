package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/memkv"
)

// readRangeStream reads a RangeStream to its end and returns its chunks
// merged, as clientv3.GetStreamToGetResponse does.
func readRangeStream(ctx context.Context, kv pb.KVClient, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	chunks, err := rangeStreamChunks(ctx, kv, r)
	if err != nil {
		return nil, err
	}
	out := &pb.RangeResponse{}
	for _, c := range chunks {
		proto.Merge(out, c)
	}
	return out, nil
}

// rangeStreamChunks reads a RangeStream to its end.
func rangeStreamChunks(ctx context.Context, kv pb.KVClient, r *pb.RangeRequest) ([]*pb.RangeResponse, error) {
	st, err := kv.RangeStream(ctx, r)
	if err != nil {
		return nil, err
	}
	var chunks []*pb.RangeResponse
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, m.RangeResponse)
	}
}

// TestRangeStreamIsRangeAtItsRevision streams a range of 3,000 keys in
// many pages while writers change, delete and create keys in it: the
// chunks together are, for every option, what Range answers at the
// stream's revision, though writes landed while the stream was read;
// only the last chunk carries header, count and more. On one instance,
// and through a follower, which reads at the leader's read index.
func TestRangeStreamIsRangeAtItsRevision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (writer, reader *clientv3.Client)
	}{
		{"one instance over badger", func(t *testing.T) (*clientv3.Client, *clientv3.Client) {
			_, cli := startServer(t, server.Config{ReadMemory: 64 << 20})
			return cli, cli
		}},
		{"a follower over memkv", func(t *testing.T) (*clientv3.Client, *clientv3.Client) {
			c := startCluster(t, memkv.New(), 2)
			l := c.awaitLeader()
			return c.client(c.ins[l].addr), c.client(c.ins[1-l].addr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writer, reader := tc.start(t)
			streamUnderWrites(t, writer, reader)
		})
	}
}

func streamUnderWrites(t *testing.T, writer, reader *clientv3.Client) {
	ctx := t.Context()
	const n = 3000
	key := func(i int) string { return fmt.Sprintf("/s/%05d", i) }
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(key(j), fmt.Sprintf("v%d-%s", j, strings.Repeat("x", j%300))))
		}
		if _, err := writer.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	first, err := writer.Get(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}

	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := key(rng.IntN(n + 200)) // some beyond the first n: created
				var err error
				if rng.IntN(3) == 0 {
					_, err = writer.Delete(ctx, k)
				} else {
					_, err = writer.Put(ctx, k, fmt.Sprintf("w%d-%s", w, strings.Repeat("y", rng.IntN(400))))
				}
				if err != nil {
					errs <- err
					return
				}
				writes.Add(1)
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("writer: %v", err)
		}
	}()
	for writes.Load() < 20 {
		time.Sleep(time.Millisecond)
	}

	kv := pb.NewKVClient(reader.ActiveConnection())
	prefix, end := []byte("/s/"), []byte("/s0")
	var overlapped int64 // writes acknowledged while a stream was read
	for round := range 3 {
		for _, tc := range []struct {
			name string
			req  *pb.RangeRequest
			opts []clientv3.OpOption
		}{
			{"whole", &pb.RangeRequest{}, nil},
			{"limit 1234", &pb.RangeRequest{Limit: 1234}, []clientv3.OpOption{clientv3.WithLimit(1234)}},
			{"limit 25", &pb.RangeRequest{Limit: 25}, []clientv3.OpOption{clientv3.WithLimit(25)}},
			{"keys only", &pb.RangeRequest{KeysOnly: true}, []clientv3.OpOption{clientv3.WithKeysOnly()}},
			{"serializable", &pb.RangeRequest{Serializable: true}, nil},
			{"at the revision before the writes", &pb.RangeRequest{Revision: first.Header.Revision}, nil},
		} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, round), func(t *testing.T) {
				req := proto.Clone(tc.req).(*pb.RangeRequest)
				req.Key, req.RangeEnd = prefix, end
				before := writes.Load()
				chunks, err := rangeStreamChunks(ctx, kv, req)
				if err != nil {
					t.Fatal(err)
				}
				during := writes.Load() - before
				overlapped += during
				got := &pb.RangeResponse{}
				for i, c := range chunks {
					if last := i == len(chunks)-1; !last && (c.Header != nil || c.Count != 0 || c.More || len(c.Kvs) == 0) {
						t.Fatalf("chunk %d of %d: header %v, count %d, more %v, %d kvs; want only kvs before the last", i, len(chunks), c.Header, c.Count, c.More, len(c.Kvs))
					}
					proto.Merge(got, c)
				}
				if got.Header == nil {
					t.Fatal("no chunk has a header")
				}
				if req.Limit == 0 || req.Limit > 100 {
					if len(chunks) < 4 {
						t.Errorf("%d chunks; want the range in pages", len(chunks))
					}
				}
				rev := got.Header.Revision
				if req.Revision != 0 {
					rev = req.Revision
				}
				opts := append([]clientv3.OpOption{clientv3.WithRange(string(end)), clientv3.WithRev(rev)}, tc.opts...)
				want, err := reader.Get(ctx, string(prefix), opts...)
				if err != nil {
					t.Fatal(err)
				}
				wantResp := &pb.RangeResponse{Kvs: want.Kvs, Count: want.Count, More: want.More}
				got.Header = nil
				if !proto.Equal(got, wantResp) {
					t.Fatalf("the stream at revision %d is %d kvs (count %d, more %v), Range there %d (count %d, more %v)%s",
						rev, len(got.Kvs), got.Count, got.More, len(want.Kvs), want.Count, want.More, firstDiff(got.Kvs, want.Kvs))
				}
				t.Logf("%d chunks, %d kvs at revision %d, %d writes during the stream", len(chunks), len(got.Kvs), rev, during)
			})
		}
	}
	if overlapped == 0 {
		t.Errorf("no write landed while a stream was read")
	}
}

// firstDiff describes where two lists of key-values first differ.
func firstDiff[KV interface{ String() string }](got, want []KV) string {
	for i := range min(len(got), len(want)) {
		if got[i].String() != want[i].String() {
			return fmt.Sprintf(": at %d got {%s}, want {%s}", i, got[i], want[i])
		}
	}
	return ""
}

// serveBudgeted serves Badger with a read budget of 1 MiB and messages of
// at most 128 KiB, so that a stream's pages stay near 128 KiB.
func serveBudgeted(t *testing.T) (*server.Server, *clientv3.Client) {
	t.Helper()
	eng, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s, cli, stop := serveEngine(t, eng, server.Config{ReadMemory: 1 << 20, MaxRequestBytes: 128 << 10})
	t.Cleanup(stop)
	return s, cli
}

// awaitNoReadMemory waits for the reads to give back all their budget.
func awaitNoReadMemory(t *testing.T, s *server.Server, after string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); s.ReadMemoryInUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s the reads still hold %v bytes of the budget", after, s.ReadMemoryInUse())
		}
	}
}

// TestRangeStreamHoldsAPageNotItsAnswer streams 2 MiB to a client that
// stops reading: the stream holds a few pages of the read budget, not
// its answer, so another read goes on under a budget of 1 MiB (with the
// answer built whole it would wait for the slow client). Once the client
// reads again the stream ends whole and right.
func TestRangeStreamHoldsAPageNotItsAnswer(t *testing.T) {
	s, cli := serveBudgeted(t)
	ctx := t.Context()
	const n = 2000
	val := putBig(t, cli, n)
	slow, gate, open := slowClient(t, cli)
	gate.gated.Store(true)
	done := make(chan error, 1)
	go func() {
		resp, err := readRangeStream(ctx, pb.NewKVClient(slow.ActiveConnection()), &pb.RangeRequest{Key: []byte("/big/"), RangeEnd: []byte("/big0")})
		if err == nil && (len(resp.Kvs) != n || resp.Count != n || resp.More) {
			err = fmt.Errorf("%d kvs, count %d, more %v; want %d, %d, false", len(resp.Kvs), resp.Count, resp.More, n, n)
		}
		for i, kv := range resp.GetKvs() {
			if err == nil && (string(kv.Key) != fmt.Sprintf("/big/%05d", i) || string(kv.Value) != val) {
				err = fmt.Errorf("kv %d is %q (%d bytes)", i, kv.Key, len(kv.Value))
			}
		}
		done <- err
	}()
	select {
	case <-gate.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never reached the slow client's connection")
	}
	var peak float64
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		peak = max(peak, s.ReadMemoryInUse())
	}
	if peak == 0 || peak > 512<<10 {
		t.Errorf("a stream of %d KiB to a client that stopped reading held up to %v bytes of the budget; want a few pages of 128 KiB", n, peak)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := cli.Get(wctx, "/big/00000", clientv3.WithRange("/big/00200"))
	cancel()
	if err != nil || len(resp.Kvs) != 200 {
		t.Fatalf("a list of 200 KiB beside the stalled stream: %v; want it to go on", err)
	}
	open()
	if err := <-done; err != nil {
		t.Fatalf("the stream: %v", err)
	}
	awaitNoReadMemory(t, s, "after the stream,")
}

// TestRangeStreamCanceledGivesBackItsBudget: a client that stops
// reading and then cancels its stream leaves messages queued that gRPC
// drops unsent; the stream's budget comes back at once, and the
// connection's later answers give theirs back as they are written, not
// after bytes the canceled stream will never send.
func TestRangeStreamCanceledGivesBackItsBudget(t *testing.T) {
	s, cli := serveBudgeted(t)
	ctx := t.Context()
	const n = 2000
	putBig(t, cli, n)
	slow, gate, open := slowClient(t, cli)
	gate.gated.Store(true)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := readRangeStream(sctx, pb.NewKVClient(slow.ActiveConnection()), &pb.RangeRequest{Key: []byte("/big/"), RangeEnd: []byte("/big0")})
		done <- err
	}()
	select {
	case <-gate.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never reached the slow client's connection")
	}
	for deadline := time.Now().Add(5 * time.Second); s.ReadMemoryInUse() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream holds none of the budget")
		}
	}
	cancel()
	awaitNoReadMemory(t, s, "with the client still not reading, after it canceled its stream,")
	open()
	if err := <-done; err == nil {
		t.Fatal("the canceled stream ended without an error")
	}
	for range 3 {
		resp, err := slow.Get(ctx, "/big/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != n {
			t.Fatalf("a list on the same connection: %v", err)
		}
		awaitNoReadMemory(t, s, "after a list on the canceled stream's connection,")
	}
}

// TestRangeStreamOutlivesACompaction: while a stream waits for its client,
// every key it has still to send is overwritten and the history below
// compacted and swept; the stream still ends with the values of its
// revision, which its one snapshot holds (a page read from a newer
// snapshot would find that history gone).
func TestRangeStreamOutlivesACompaction(t *testing.T) {
	_, cli := serveBudgeted(t)
	ctx := t.Context()
	const n = 2000
	val := putBig(t, cli, n)
	slow, gate, open := slowClient(t, cli)
	gate.gated.Store(true)
	done := make(chan error, 1)
	go func() {
		resp, err := readRangeStream(ctx, pb.NewKVClient(slow.ActiveConnection()), &pb.RangeRequest{Key: []byte("/big/"), RangeEnd: []byte("/big0")})
		if err == nil && (len(resp.Kvs) != n || resp.Count != n) {
			err = fmt.Errorf("%d kvs, count %d; want %d", len(resp.Kvs), resp.Count, n)
		}
		for i, kv := range resp.GetKvs() {
			if err == nil && (string(kv.Key) != fmt.Sprintf("/big/%05d", i) || string(kv.Value) != val) {
				err = fmt.Errorf("kv %d is %q = %.8q…; want the value at the stream's revision", i, kv.Key, kv.Value)
			}
		}
		done <- err
	}()
	select {
	case <-gate.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never reached the slow client's connection")
	}
	var rev int64
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/big/%05d", j), "later"))
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	open()
	if err := <-done; err != nil {
		t.Fatalf("the stream: %v", err)
	}
}
