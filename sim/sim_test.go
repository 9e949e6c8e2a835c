package sim

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestSameSeedSameTrace is the replay guarantee: a seed's run is a pure
// function of the seed.
func TestSameSeedSameTrace(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42} {
		a := Run(Config{Seed: seed, Ops: 500})
		b := Run(Config{Seed: seed, Ops: 500})
		if a.Hash != b.Hash || a.Line() != b.Line() {
			t.Fatalf("seed %d ran twice differently:\n%s\n%s", seed, a.Line(), b.Line())
		}
	}
	if Run(Config{Seed: 1, Ops: 500}).Hash == Run(Config{Seed: 2, Ops: 500}).Hash {
		t.Fatal("two seeds gave the same trace hash")
	}
}

// runSeeds runs seeds [first, first+n) on two goroutines and returns
// the failures.
func runSeeds(first uint64, n int, cfg Config) []Result {
	var (
		next  atomic.Uint64
		mu    sync.Mutex
		fails []Result
		wg    sync.WaitGroup
	)
	next.Store(first)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed >= first+uint64(n) {
					return
				}
				c := cfg
				c.Seed = seed
				if r := Run(c); r.Err != nil {
					mu.Lock()
					fails = append(fails, r)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return fails
}

// TestSwarm runs 200 seeds of 1,000 client operations each, every one
// with its own fault mix, through every checker.
func TestSwarm(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	for _, r := range runSeeds(1, n, Config{Ops: 1000}) {
		t.Errorf("%s\n  replay: axon sim --seed %d", r.Line(), r.Seed)
	}
}

// TestPorcupineAgrees cross-checks a few short histories with
// porcupine's own search as well as the revision-order witness.
func TestPorcupineAgrees(t *testing.T) {
	for _, r := range runSeeds(1000, 6, Config{Ops: 200, Porcupine: true}) {
		t.Errorf("%s", r.Line())
	}
}

// TestBrokenDriftIsCaught breaks the clock-drift bound the leadership
// protocol assumes; the checkers must then find anomalies, or they could
// not see what they are there to see.
func TestBrokenDriftIsCaught(t *testing.T) {
	fails := runSeeds(1, 100, Config{Ops: 1000, BreakDrift: true})
	if len(fails) == 0 {
		t.Fatal("100 seeds with broken clock drift all passed: the checks see nothing")
	}
	t.Logf("%d of 100 seeds with broken drift failed, e.g. %s", len(fails), fails[0].Line())
}

// BenchmarkSeed measures whole seeds (1,000 client operations, faults,
// heal, every check): seeds per minute and client operations per second.
func BenchmarkSeed(b *testing.B) {
	ops := 0
	for i := 0; i < b.N; i++ {
		r := Run(Config{Seed: uint64(i + 1), Ops: 1000})
		if r.Err != nil {
			b.Fatal(r.Line())
		}
		ops += r.Ops
	}
	el := b.Elapsed()
	b.ReportMetric(float64(b.N)/el.Minutes(), "seeds/min")
	b.ReportMetric(float64(ops)/el.Seconds(), "ops/s")
}
