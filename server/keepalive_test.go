package server_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/axon-kv/axon/server"
)

// TestKeepAlivePingsKeepTheConnection: a client that pings as often as
// grpc-go lets it (every 10 s; kube-apiserver pings every 30 s) keeps its
// connection and its watch for a minute under etcd's keepalive policy. A
// server enforcing grpc-go's own default (one ping per 5 minutes) drops
// it with GOAWAY "too_many_pings", which shows the test can see a drop.
func TestKeepAlivePingsKeepTheConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a minute")
	}
	cases := []struct {
		name     string
		policy   server.KeepAlive
		wantDrop bool
	}{
		{"etcd's policy keeps the connection", server.KeepAlive{}, false},
		{"grpc-go's default policy drops it", server.KeepAlive{MinTime: 5 * time.Minute}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, plain := startServer(t, server.Config{KeepAlive: tc.policy})
			cli, err := clientv3.New(clientv3.Config{
				Endpoints: plain.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
				DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// A watch keeps a stream open: pings then count against
			// MinTime rather than against the no-stream allowance.
			wch := cli.Watch(ctx, "/ka/", clientv3.WithPrefix())
			if _, err := cli.Put(ctx, "/ka/k", "v"); err != nil {
				t.Fatal(err)
			}
			if wr := <-wch; wr.Err() != nil || len(wr.Events) != 1 {
				t.Fatalf("first watch response: %v %v", wr.Err(), wr.Events)
			}
			conn := cli.ActiveConnection()
			dropped := false
			for state := conn.GetState(); conn.WaitForStateChange(ctx, state); {
				state = conn.GetState()
				if state != connectivity.Ready {
					t.Logf("connection went %v", state)
					dropped = true
					break
				}
			}
			if dropped != tc.wantDrop {
				t.Fatalf("connection dropped within a minute: %v, want %v", dropped, tc.wantDrop)
			}
		})
	}
}
