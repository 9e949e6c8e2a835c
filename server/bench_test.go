package server_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/server"
)

// BenchmarkCreate is the Kubernetes create (Txn If ModRevision==0 Then
// Put) from 64 concurrent clients through gRPC into Badger, sync on.
func BenchmarkCreate(b *testing.B) {
	_, cli := startServer(b, server.Config{})
	value := strings.Repeat("v", 512)
	var n atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS(2) = 64 clients
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("/registry/pods/ns/pod-%08d", n.Add(1))
			resp, err := cli.Txn(b.Context()).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
			if err != nil || !resp.Succeeded {
				b.Fatalf("create %s: %v %v", key, resp, err)
			}
		}
	})
}

// BenchmarkGet is a linearizable Get from 64 concurrent clients.
func BenchmarkGet(b *testing.B) {
	_, cli := startServer(b, server.Config{})
	if _, err := cli.Put(b.Context(), "k", strings.Repeat("v", 512)); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cli.Get(b.Context(), "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
