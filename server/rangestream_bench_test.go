package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/server"
)

// BenchmarkRangeStream100k streams a Kubernetes-sized list, 100,000
// objects of 1 KiB, from one server to a client in the same process that
// counts and drops each chunk; the server's read memory budget is 512
// MiB, the default's cap, so that it counts and never waits. Memory is
// above the live heap before the stream, client and server together.
//
// time: the time per stream and to its first message, and, sampled every
// millisecond, the peaks of the heap's objects (live or garbage not yet
// swept: what the process grows by at the default GOGC) and of the read
// budget in use.
//
// live: the peak of the live heap, from a collection the client forces
// between two messages every 20 ms, while the server can send no more
// than the flow-control window ahead (a collection that runs beside the
// stream counts as live what is allocated while it marks, garbage
// included).
func BenchmarkRangeStream100k(b *testing.B) {
	s, cli := startServer(b, server.Config{ReadMemory: 512 << 20})
	const n = 100_000
	loadObjects(b, cli, n)
	kv := pb.NewKVClient(cli.ActiveConnection())
	req := &pb.RangeRequest{Key: []byte("/registry/pods/"), RangeEnd: []byte("/registry/pods0")}
	// stream runs one stream, with beside (if not nil) run every
	// millisecond beside it and between (if not nil) between messages,
	// and returns when the first message came.
	stream := func(b *testing.B, beside, between func()) time.Duration {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if beside != nil {
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					beside()
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			})
		}
		start := time.Now()
		got, firstAt, err := drainRangeStream(b.Context(), kv, req, between)
		close(stop)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("streamed %d kvs, want %d", got, n)
		}
		return firstAt.Sub(start)
	}
	b.Run("time", func(b *testing.B) {
		var first time.Duration
		var heap, budget float64
		runs := 0
		for b.Loop() {
			runtime.GC()
			base, _ := heapStats()
			var peakHeap uint64
			var peakBudget float64
			first += stream(b, func() {
				objects, _ := heapStats()
				peakHeap = max(peakHeap, objects)
				peakBudget = max(peakBudget, s.ReadMemoryInUse())
			}, nil)
			heap += float64(max(peakHeap, base)-base) / (1 << 20)
			budget += peakBudget / (1 << 20)
			runs++
		}
		b.ReportMetric(first.Seconds()*1000/float64(runs), "ms-to-first")
		b.ReportMetric(heap/float64(runs), "MiB-heap-peak")
		b.ReportMetric(budget/float64(runs), "MiB-budget-peak")
	})
	b.Run("live", func(b *testing.B) {
		var live float64
		runs := 0
		for b.Loop() {
			runtime.GC()
			_, base := heapStats()
			var peak uint64
			var last time.Time
			stream(b, nil, func() {
				if time.Since(last) < 20*time.Millisecond {
					return
				}
				runtime.GC()
				_, l := heapStats()
				peak = max(peak, l)
				last = time.Now()
			})
			live += float64(max(peak, base)-base) / (1 << 20)
			runs++
		}
		b.ReportMetric(live/float64(runs), "MiB-live-peak")
	})
}

// drainRangeStream reads a RangeStream to its end, keeping nothing and
// calling between (if not nil) after each message: the number of kvs and
// when the first message came.
func drainRangeStream(ctx context.Context, kv pb.KVClient, req *pb.RangeRequest, between func()) (int, time.Time, error) {
	st, err := kv.RangeStream(ctx, req)
	if err != nil {
		return 0, time.Time{}, err
	}
	var firstAt time.Time
	got := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, firstAt, nil
		}
		if err != nil {
			return 0, time.Time{}, err
		}
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
		got += len(m.RangeResponse.Kvs)
		if between != nil {
			between()
		}
	}
}

// loadObjects writes n objects of 1 KiB under /registry/pods/, 100 a txn
// from 8 clients at once.
func loadObjects(b *testing.B, cli *clientv3.Client, n int) {
	value := strings.Repeat("v", 1024)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w * 100; i < n; i += 800 {
				var ops []clientv3.Op
				for j := i; j < min(i+100, n); j++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns/pod-%08d", j), value))
				}
				if _, err := cli.Txn(b.Context()).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// heapStats reads, without stopping the world, the bytes of the heap's
// objects (live or not yet swept) and of the live heap as the last
// collection marked it.
func heapStats() (objects, live uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
