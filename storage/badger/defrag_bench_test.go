package badger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDefragUnderWrites measures what a defragmentation costs the
// writes that go on meanwhile (the churn's goal: no stall over
// 100 ms): a store of 100k keys of 1 KiB, each overwritten twice so that
// two thirds of it is garbage, defragmented while 64 writers overwrite
// random keys. It reports the longest write that overlapped the
// defragmentation, their p99, and how long the defragmentation took; the
// baseline is the same writers for a second without one (on a loaded
// machine its longest write is no shorter than 100 ms). The store's files
// before the first run and after the last show that space comes back.
//
//	go test ./storage/badger -run '^$' -bench DefragUnderWrites -benchtime 3x
func BenchmarkDefragUnderWrites(b *testing.B) {
	const (
		keys    = 100_000
		writers = 64
	)
	e, err := Open(b.TempDir(), Options{MemoryBudget: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	value := make([]byte, 1024)
	put := func(rng *rand.Rand, ks []int) error {
		tx, err := e.Begin(ctx)
		if err != nil {
			return err
		}
		for _, k := range ks {
			for i := range value {
				value[i] = byte(rng.Uint32())
			}
			if err := tx.Set(fmt.Appendf(nil, "key%07d", k), slices.Clone(value)); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 3; round++ {
		for k := 0; k < keys; k += 500 {
			if err := put(rng, intsFrom(k, min(k+500, keys))); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"defrag", func() error { return e.Defrag(ctx) }},
		{"baseline", func() error { time.Sleep(time.Second); return nil }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var worst, took time.Duration
			var p99s []time.Duration
			var before, after int64
			for b.Loop() {
				f, err := e.files()
				if err != nil {
					b.Fatal(err)
				}
				if before == 0 {
					before = f.mem + f.tables + f.vlog
				}
				w, p, d := underWrites(b, e, writers, keys, c.run)
				if f, err = e.files(); err != nil {
					b.Fatal(err)
				}
				after = f.mem + f.tables + f.vlog
				worst, took = max(worst, w), max(took, d)
				p99s = append(p99s, p)
			}
			slices.Sort(p99s)
			b.ReportMetric(float64(worst.Milliseconds()), "worst-write-ms")
			b.ReportMetric(float64(p99s[len(p99s)/2].Milliseconds()), "p99-write-ms")
			b.ReportMetric(took.Seconds(), "s")
			b.ReportMetric(float64(before>>20), "MiB-before")
			b.ReportMetric(float64(after>>20), "MiB-after")
		})
	}
}

// underWrites runs run while writers overwrite random keys; it returns
// the longest write overlapping it, their p99 and its time.
func underWrites(b *testing.B, e *Engine, writers, keys int, run func() error) (worst, p99, took time.Duration) {
	ctx := context.Background()
	var (
		stop    atomic.Bool
		mu      sync.Mutex
		spans   [][2]time.Time
		wg      sync.WaitGroup
		started = make(chan struct{}, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			v := make([]byte, 1024)
			started <- struct{}{}
			for !stop.Load() {
				for i := range v {
					v[i] = byte(rng.Uint32())
				}
				begin := time.Now()
				tx, err := e.Begin(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := tx.Set(fmt.Appendf(nil, "key%07d", rng.IntN(keys)), v); err != nil {
					b.Error(err)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					continue // a conflict with another writer: normal
				}
				mu.Lock()
				spans = append(spans, [2]time.Time{begin, time.Now()})
				mu.Unlock()
			}
		}()
	}
	for range writers {
		<-started
	}
	start := time.Now()
	if err := run(); err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	stop.Store(true)
	wg.Wait()
	var lat []time.Duration
	for _, s := range spans {
		if s[1].After(start) && s[0].Before(end) {
			lat = append(lat, s[1].Sub(s[0]))
		}
	}
	if len(lat) == 0 {
		b.Fatal("no write overlapped the defragmentation")
	}
	slices.Sort(lat)
	return lat[len(lat)-1], lat[len(lat)*99/100], end.Sub(start)
}

func intsFrom(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}
