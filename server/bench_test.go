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

// BenchmarkList10k is the apiserver's paginated list (limit 500) of
// 10,000 objects of 1 KiB, the later pages at the first page's revision.
func BenchmarkList10k(b *testing.B) {
	_, cli := startServer(b, server.Config{})
	value := strings.Repeat("v", 1024)
	for i := 0; i < 10000; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns/pod-%08d", j), value))
		}
		if _, err := cli.Txn(b.Context()).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		key, end, rev, n := "/registry/pods/", clientv3.GetPrefixRangeEnd("/registry/pods/"), int64(0), 0
		for {
			resp, err := cli.Get(b.Context(), key, clientv3.WithRange(end), clientv3.WithLimit(500), clientv3.WithRev(rev))
			if err != nil {
				b.Fatal(err)
			}
			n += len(resp.Kvs)
			rev = resp.Header.Revision
			if !resp.More {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		if n != 10000 {
			b.Fatalf("listed %d", n)
		}
	}
}
