package tikv

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/tikvrpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// BenchmarkScan100k reads 100,000 latest records of 1 KiB under one
// prefix in one full forward scan per op, over 1 region and over 8
// (parallel, and with parallel scans off). The mock answers in-process;
// the rtt=2ms runs add a simulated network round trip to each Scan RPC,
// which is what region-parallel scans hide on a real cluster.
func BenchmarkScan100k(b *testing.B) {
	const n = 100_000
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	keys, values, _ := pods(n, func(int) []byte { return value })
	for _, c := range []struct {
		name        string
		regions     int
		concurrency int
	}{
		{"regions=1", 1, 0},
		{"regions=8", 8, 0},
		{"regions=8/sequential", 8, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			var rtt atomic.Int64
			rec := newRecorder()
			rec.setHook(func(req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error, bool) {
				if d := time.Duration(rtt.Load()); d > 0 && req.Type == tikvrpc.CmdScan {
					time.Sleep(d) // the simulated network, not a wait for state
				}
				return nil, nil, false
			})
			// Regions spread DefaultSampleFormat keys, as pods() writes.
			e := newMock(b, MockOptions{Regions: c.regions, ScanConcurrency: c.concurrency, WrapClient: rec.wrap})
			load(b, e, keys, values, 1000)
			for _, d := range []time.Duration{0, 2 * time.Millisecond} {
				b.Run(fmt.Sprintf("rtt=%v", d), func(b *testing.B) {
					rtt.Store(int64(d))
					b.SetBytes(n * int64(len(value)))
					b.ReportAllocs()
					for b.Loop() {
						scanAll(b, e, n)
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
				})
			}
		})
	}
}

func scanAll(b *testing.B, e *Engine, n int) {
	tx := begin(b, e)
	defer tx.Rollback()
	it, err := tx.Iter(storage.IterOptions{Lower: core.LatestKey(nil), Upper: core.MetaKey("")})
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	got := 0
	for it.Next() {
		got++
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	if got != n {
		b.Fatalf("scanned %d keys; want %d", got, n)
	}
}

// BenchmarkCommit commits one 100-byte write per transaction.
func BenchmarkCommit(b *testing.B) {
	value := make([]byte, 100)
	commit := func(b *testing.B, e *Engine, i int64) {
		tx, err := e.Begin(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Set(core.LatestKey(fmt.Appendf(nil, "/registry/leases/ns/lease-%09d", i)), value); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		e := newMock(b, MockOptions{Regions: 8})
		var i int64
		for b.Loop() {
			i++
			commit(b, e, i)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		e := newMock(b, MockOptions{Regions: 8})
		var i atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				commit(b, e, i.Add(1))
			}
		})
	})
}
