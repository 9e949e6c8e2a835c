package server_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// secretReads is an engine that counts the reads of the instances'
// shared secret.
type secretReads struct {
	storage.Engine
	n atomic.Int64
}

func (e *secretReads) Begin(ctx context.Context) (storage.Txn, error) {
	txn, err := e.Engine.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return secretTxn{Txn: txn, e: e}, nil
}

type secretTxn struct {
	storage.Txn
	e *secretReads
}

func (t secretTxn) Get(key []byte) ([]byte, error) {
	if bytes.Equal(key, core.MetaKey(server.PeerSecretKey)) {
		t.e.n.Add(1)
	}
	return t.Txn.Get(key)
}

// TestABogusProofCostsNoEngineRead: anyone can send a call with an
// instance proof, garbage or sealed with a guess; it is served as a
// client's, and checking it reads the engine at most once in the
// instance's life (a shared engine's secret is created or read once and
// kept; an exclusive engine has no other instance to check for).
func TestABogusProofCostsNoEngineRead(t *testing.T) {
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			eng := &secretReads{Engine: memkv.New()}
			c := newCluster(t, eng, 1)
			c.tweak = func(cfg *server.Config) { cfg.Exclusive = exclusive }
			c.startAll()
			conn, err := grpc.NewClient(c.ins[0].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			kv := pb.NewKVClient(conn)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			before := eng.n.Load()
			const calls = 200
			for i := range calls {
				proof := "garbage"
				if i%2 == 1 {
					proof = auth.SealPeerProof([]byte(fmt.Sprint("guess", i)), auth.PeerProof{Instance: "x", User: "root", Expires: time.Now().Add(10 * time.Second).UnixNano()})
				}
				if _, err := kv.Range(metadata.AppendToOutgoingContext(ctx, server.PeerProofKey, proof), &pb.RangeRequest{Key: []byte("k")}); err != nil {
					t.Fatalf("call %d with a bogus proof: %v", i, err)
				}
			}
			want := int64(1)
			if exclusive {
				want = 0
			}
			if got := eng.n.Load() - before; got > want {
				t.Errorf("%d calls with bogus proofs read the secret %d times, want at most %d", calls, got, want)
			}
		})
	}
}
