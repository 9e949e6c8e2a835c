package tikvserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pingcap/log"
	"go.uber.org/zap/zapcore"

	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/storagetest"
	"github.com/axon-kv/axon/storage/tikv"
)

func TestMain(m *testing.M) {
	// client-go and the PD client log at INFO (every reconnect, every
	// region reload); AXON_TIKV_LOG=1 shows them.
	if os.Getenv("AXON_TIKV_LOG") == "" {
		log.SetLevel(zapcore.FatalLevel)
	}
	os.Exit(m.Run())
}

// conformanceSplits cut storagetest's keys so that its scans, conflicts
// and multi-key commits cross region borders, as storage/tikv's own
// conformance test does over the in-process mock.
var conformanceSplits = []string{
	"\x00\x00", "a\x00", "b", "counter1", "counter2", "d", "it3", "k3", "other",
	"scan0150", "scan0300", "scan0450", "\xff\x00",
}

func splitKeys(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, s := range keys {
		out[i] = []byte(s)
	}
	return out
}

// testLog is a logger for the server that writes to the test's log.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// start starts a server on a loopback port, closed when the test ends.
func start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	s, err := Start("127.0.0.1:0", opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close server: %v", err)
		}
	})
	return s
}

// open opens the production engine (tikv.Open: client-go's network
// path) on s. The caller closes it.
func open(t testing.TB, s *Server) *tikv.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := tikv.Open(ctx, []string{s.Addr()}, tikv.Options{})
	if err != nil {
		t.Fatalf("tikv.Open %s: %v", s.Addr(), err)
	}
	return e
}

// describeCalls renders the calls s served, one a line.
func describeCalls(s *Server) string {
	calls := s.Calls()
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString("\n  " + n + " " + strconv.FormatInt(calls[n], 10))
	}
	return b.String()
}

// knownUnimplemented are the calls client-go makes that the server
// leaves unimplemented. The PD client opens a stream to PD's resource
// manager at start, which only resource control (off in Axon) uses.
var knownUnimplemented = map[string]bool{
	"/resource_manager.ResourceManager/AcquireTokenBuckets": true,
}

// checkImplemented fails the test if s was asked for anything it does
// not implement and client-go is not known to ask for.
func checkImplemented(t testing.TB, s *Server) {
	t.Helper()
	for m, n := range s.Unimplemented() {
		if !knownUnimplemented[m] {
			t.Errorf("unimplemented %s called %d times", m, n)
		}
	}
}

// conformance runs the engine contract suite over a server per subtest,
// made with opts.
func conformance(t *testing.T, opts Options, check func(t *testing.T, s *Server)) {
	storagetest.Run(t, func(t *testing.T) storage.Engine {
		o := opts
		o.SplitKeys = splitKeys(conformanceSplits)
		s := start(t, o)
		t.Cleanup(func() {
			checkImplemented(t, s)
			if check != nil {
				check(t, s)
			}
		})
		return open(t, s)
	})
}

func TestConformance(t *testing.T) {
	conformance(t, Options{}, nil)
}

// TestConformanceDelayed runs the suite with every call delayed, as a
// network between Axon and TiKV would.
func TestConformanceDelayed(t *testing.T) {
	conformance(t, Options{RPCDelay: time.Millisecond}, nil)
}

// TestConformanceRegionErrorsAndSplits runs the suite while requests fail
// with region errors client-go must retry without the engine seeing them,
// and while regions split under it.
func TestConformanceRegionErrorsAndSplits(t *testing.T) {
	var mu sync.Mutex
	injected := map[RegionErrorKind]int64{}
	splits := 0
	conformance(t, Options{
		RegionErrorRate: 0.05,
		RegionErrors:    []RegionErrorKind{NotLeader, EpochNotMatch},
		SplitEvery:      10 * time.Millisecond,
	}, func(t *testing.T, s *Server) {
		mu.Lock()
		defer mu.Unlock()
		for k, n := range s.InjectedErrors() {
			injected[k] += n
		}
		splits += s.Regions() - len(conformanceSplits) - 1
	})
	t.Logf("injected %v; split %d regions", injected, splits)
	for _, k := range []RegionErrorKind{NotLeader, EpochNotMatch} {
		if injected[k] == 0 {
			t.Errorf("no %s was injected", k)
		}
	}
	if splits == 0 {
		t.Error("no region was split")
	}
}

// TestRegionErrorsAreRetried checks each kind of region error alone: the
// engine's reads and writes succeed as if none had happened.
func TestRegionErrorsAreRetried(t *testing.T) {
	for _, c := range []struct {
		kind RegionErrorKind
		rate float64
		txns int
	}{
		{NotLeader, 0.3, 30},
		{EpochNotMatch, 0.3, 30},
		// Each costs client-go a backoff of 1 to 2 seconds.
		{ServerIsBusy, 0.1, 8},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			s := start(t, Options{RegionErrorRate: c.rate, RegionErrors: []RegionErrorKind{c.kind}, Seed: 1})
			e := open(t, s)
			defer e.Close()
			ctx := context.Background()
			for i := range c.txns {
				k, v := []byte(fmt.Sprintf("key%03d", i)), []byte(fmt.Sprintf("value%d", i))
				tx, err := e.Begin(ctx)
				if err != nil {
					t.Fatalf("Begin: %v", err)
				}
				if err := tx.Set(k, v); err != nil {
					t.Fatalf("Set: %v", err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("Commit %s: %v", k, err)
				}
				tx, err = e.Begin(ctx)
				if err != nil {
					t.Fatalf("Begin: %v", err)
				}
				got, err := tx.Get(k)
				tx.Rollback()
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("Get %s = %q, %v; want %q", k, got, err, v)
				}
			}
			if n := s.InjectedErrors()[c.kind]; n == 0 {
				t.Errorf("no %s was injected", c.kind)
			} else {
				t.Logf("%d %s injected", n, c.kind)
			}
		})
	}
}

func TestStartRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		addr string
		opts Options
	}{
		{"all interfaces", "0.0.0.0:0", Options{}},
		{"no host", ":0", Options{}},
		{"a rate above 1", "127.0.0.1:0", Options{RegionErrorRate: 1.5}},
		{"a negative delay", "127.0.0.1:0", Options{RPCDelay: -time.Second}},
		{"an empty split key", "127.0.0.1:0", Options{SplitKeys: [][]byte{{}}}},
	} {
		if s, err := Start(c.addr, c.opts); err == nil {
			s.Close()
			t.Errorf("%s: Start succeeded", c.name)
		}
	}
	if _, err := ParseRegionErrors("NotLeader,Bogus"); err == nil {
		t.Error("ParseRegionErrors accepted Bogus")
	}
	kinds, err := ParseRegionErrors(" notleader, EPOCHNOTMATCH ,")
	if err != nil || len(kinds) != 2 || kinds[0] != NotLeader || kinds[1] != EpochNotMatch {
		t.Errorf("ParseRegionErrors = %v, %v; want [NotLeader EpochNotMatch]", kinds, err)
	}
}
