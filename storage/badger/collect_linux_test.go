package badger

import (
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCollectColdFile collects value log files of 1 KiB values, 1 %
// of them live, whose pages have left the page cache, as under the long
// churn: once as badger reads them (through its MADV_RANDOM mapping) and
// once read ahead (collectOne). It reports the process's CPU per file
// beside the time.
//
//	go test ./storage/badger -run '^$' -bench CollectColdFile -benchtime 8x
func BenchmarkCollectColdFile(b *testing.B) {
	for _, bc := range []struct {
		name    string
		collect func(e *Engine) error
	}{
		{"badger", func(e *Engine) error { return e.db.RunValueLogGC(collectRatio) }},
		{"read-ahead", (*Engine).collectOne},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			e := open(b, dir)
			defer e.Close()
			e.defragging.Lock() // the engine's own collection stays out of the way
			defer e.defragging.Unlock()
			const perFile = 15000 // 1 KiB values in a 16 MiB file
			keys := (b.N + 2) * perFile
			value := make([]byte, 1024)
			for _, v := range []int{len(value), 10} {
				for i := 0; i < keys; i += 1000 {
					var pairs [][]byte
					for k := i; k < min(i+1000, keys); k++ {
						if v < len(value) && k%100 == 0 {
							continue // live: the file keeps 1 %
						}
						rand.Read(value)
						pairs = append(pairs, fmt.Appendf(nil, "k%08d", k), append([]byte(nil), value[:v]...))
					}
					set(b, e, pairs...)
				}
			}
			if err := e.flushAlone(b.Context()); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				path, _, ok := nextCollected(dir, collectRatio)
				if !ok {
					b.Fatal("no file to collect")
				}
				dropColdFile(b, path)
				before := cpuTime(b)
				b.StartTimer()
				if err := bc.collect(e); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - before
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/file")
		})
	}
}

// dropColdFile drops a mapped file's pages from the process and the
// page cache.
func dropColdFile(tb testing.TB, path string) {
	tb.Helper()
	maps, err := selfMaps()
	if err != nil {
		tb.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	for _, m := range maps {
		if m.Pathname == abs {
			if _, err := dropCached(uint64(m.StartAddr), uint64(m.EndAddr), abs); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// cpuTime is the process's user and system CPU so far.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
