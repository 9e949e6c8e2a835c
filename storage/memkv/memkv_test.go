package memkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine { return New() })
}

// onCommit injects f into commits and a fixed delay into every operation.
func onCommit(f Fault) Injector {
	return InjectorFunc(func(op Op) Fault {
		if op.Kind == OpCommit {
			return f
		}
		return Fault{Delay: time.Millisecond}
	})
}

func begin(t *testing.T, e *Engine) *Txn {
	t.Helper()
	tx, err := e.Begin(t.Context())
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx.(*Txn)
}

// latest returns the committed value of k, or "<none>".
func latest(t *testing.T, e *Engine, k string) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.read([]byte(k), e.ts)
	if !ok {
		return "<none>"
	}
	return string(v)
}

func put(t *testing.T, e *Engine, k, v string) {
	t.Helper()
	tx := begin(t, e)
	if err := tx.Set([]byte(k), []byte(v)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func TestCommitFaults(t *testing.T) {
	const after = 5 * time.Second
	tests := []struct {
		kind        FaultKind
		wantErr     error // nil: Commit succeeds
		visibleNow  bool
		pending     int
		outcomeNow  Outcome
		visibleLate bool // after virtual time passes now+after
		outcomeLate Outcome
	}{
		{FaultNone, nil, true, 0, Applied, true, Applied},
		{FaultError, ErrInjected, false, 0, NotApplied, false, NotApplied},
		{FaultUnavailable, storage.ErrUnavailable, false, 0, NotApplied, false, NotApplied},
		{FaultUncertainNotApplied, storage.ErrUncertain, false, 0, NotApplied, false, NotApplied},
		{FaultUncertainApplied, storage.ErrUncertain, true, 0, Applied, true, Applied},
		{FaultUncertainAppliedLater, storage.ErrUncertain, false, 1, Undecided, true, Applied},
	}
	for _, tc := range tests {
		t.Run(tc.kind.String(), func(t *testing.T) {
			e := New()
			put(t, e, "k", "orig")
			e.SetNow(time.Second)
			e.SetInjector(onCommit(Fault{Kind: tc.kind, Delay: 10 * time.Millisecond, ApplyAfter: after}))
			tx := begin(t, e)
			if _, err := tx.Get([]byte("k")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Set([]byte("k"), []byte("new")); err != nil {
				t.Fatal(err)
			}
			err := tx.Commit(t.Context())
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Commit = %v; want %v", err, tc.wantErr)
			}
			for _, other := range []error{storage.ErrConflict, storage.ErrUncertain, storage.ErrUnavailable, ErrInjected} {
				if other != tc.wantErr && errors.Is(err, other) {
					t.Errorf("Commit = %v; also matches %v", err, other)
				}
			}
			if got, want := tx.Delay(), 12*time.Millisecond; got != want {
				t.Errorf("Delay = %v; want %v (begin, get, commit)", got, want)
			}
			check := func(when string, visible bool, pending int, outcome Outcome) {
				t.Helper()
				want := "orig"
				if visible {
					want = "new"
				}
				if got := latest(t, e, "k"); got != want {
					t.Errorf("%s: k = %q; want %q", when, got, want)
				}
				if got := e.Pending(); got != pending {
					t.Errorf("%s: Pending = %d; want %d", when, got, pending)
				}
				if got := tx.Outcome(); got != outcome {
					t.Errorf("%s: Outcome = %v; want %v", when, got, outcome)
				}
			}
			check("at commit", tc.visibleNow, tc.pending, tc.outcomeNow)
			e.SetNow(time.Second + after - 1)
			check("just before apply time", tc.visibleNow, tc.pending, tc.outcomeNow)
			e.SetNow(time.Second + after)
			check("at apply time", tc.visibleLate, 0, tc.outcomeLate)
			e.SetNow(time.Hour)
			check("much later", tc.visibleLate, 0, tc.outcomeLate)
		})
	}
}

func TestDelayedApply(t *testing.T) {
	later := Fault{Kind: FaultUncertainAppliedLater, ApplyAfter: 10 * time.Second}
	tests := []struct {
		name        string
		meanwhile   func(t *testing.T, e *Engine) // runs between Commit and the apply time
		wantK       string
		wantOutcome Outcome
	}{
		{"no interference lands at its time", func(t *testing.T, e *Engine) { put(t, e, "j", "other") }, "delayed", Applied},
		{"fencing write-back drops it", func(t *testing.T, e *Engine) {
			tx := begin(t, e)
			v, err := tx.Get([]byte("k"))
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Set([]byte("k"), v); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, "orig", NotApplied},
		{"fencing lock drops it", func(t *testing.T, e *Engine) {
			tx := begin(t, e)
			if err := tx.Lock([]byte("k")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, "orig", NotApplied},
		{"conflicting write drops it", func(t *testing.T, e *Engine) { put(t, e, "k", "winner") }, "winner", NotApplied},
		{"write to a locked key drops it", func(t *testing.T, e *Engine) { put(t, e, "locked", "x") }, "orig", NotApplied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			put(t, e, "k", "orig")
			tx := begin(t, e)
			if err := tx.Set([]byte("k"), []byte("delayed")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Lock([]byte("locked")); err != nil {
				t.Fatal(err)
			}
			e.SetInjector(onCommit(later))
			if err := tx.Commit(t.Context()); !errors.Is(err, storage.ErrUncertain) {
				t.Fatalf("Commit = %v; want ErrUncertain", err)
			}
			e.SetInjector(nil)
			e.SetNow(5 * time.Second)
			tc.meanwhile(t, e)
			if e.Pending() != 1 || tx.Outcome() != Undecided {
				t.Fatalf("before apply time: Pending = %d, Outcome = %v", e.Pending(), tx.Outcome())
			}
			before := begin(t, e).StartTS()
			e.SetNow(10 * time.Second)
			if got := latest(t, e, "k"); got != tc.wantK {
				t.Errorf("k = %q; want %q", got, tc.wantK)
			}
			if got := tx.Outcome(); got != tc.wantOutcome {
				t.Errorf("Outcome = %v; want %v", got, tc.wantOutcome)
			}
			if e.Pending() != 0 {
				t.Errorf("Pending = %d after apply time", e.Pending())
			}
			after := begin(t, e).StartTS()
			if applied := tc.wantOutcome == Applied; applied != (after > before) {
				t.Errorf("StartTS %d -> %d across the delayed apply (applied=%v)", before, after, applied)
			}
		})
	}
}

// TestDelayedApplyOrder holds three transactions from one snapshot that all
// write x: they apply in order of apply time, ties by Commit order, and the
// first to apply makes the others conflict.
func TestDelayedApplyOrder(t *testing.T) {
	e := New()
	txs := map[string]*Txn{}
	for _, name := range []string{"A", "B", "C"} {
		txs[name] = begin(t, e)
		if err := txs[name].Set([]byte("x"), []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		after time.Duration
	}{{"A", 5 * time.Second}, {"B", 3 * time.Second}, {"C", 3 * time.Second}} {
		e.SetInjector(onCommit(Fault{Kind: FaultUncertainAppliedLater, ApplyAfter: c.after}))
		if err := txs[c.name].Commit(t.Context()); !errors.Is(err, storage.ErrUncertain) {
			t.Fatalf("%s: Commit = %v", c.name, err)
		}
	}
	if e.Pending() != 3 {
		t.Fatalf("Pending = %d; want 3", e.Pending())
	}
	e.SetNow(time.Minute)
	if got := latest(t, e, "x"); got != "B" {
		t.Errorf("x = %q; want B", got)
	}
	for name, want := range map[string]Outcome{"A": NotApplied, "B": Applied, "C": NotApplied} {
		if got := txs[name].Outcome(); got != want {
			t.Errorf("%s: Outcome = %v; want %v", name, got, want)
		}
	}
}

func TestUnavailableWindow(t *testing.T) {
	ops := []struct {
		name string
		do   func(e *Engine, tx *Txn) error
	}{
		{"Begin", func(e *Engine, _ *Txn) error { _, err := e.Begin(t.Context()); return err }},
		{"Get", func(_ *Engine, tx *Txn) error { _, err := tx.Get([]byte("k")); return err }},
		{"Iter", func(_ *Engine, tx *Txn) error { _, err := tx.Iter(storage.IterOptions{}); return err }},
		{"Commit", func(_ *Engine, tx *Txn) error { return tx.Commit(t.Context()) }},
	}
	for _, op := range ops {
		for _, tc := range []struct {
			now  time.Duration
			down bool
		}{{9 * time.Second, false}, {10 * time.Second, true}, {19 * time.Second, true}, {20 * time.Second, false}} {
			t.Run(fmt.Sprintf("%s/at=%v", op.name, tc.now), func(t *testing.T) {
				e := New()
				put(t, e, "k", "orig")
				e.SetUnavailable(10*time.Second, 20*time.Second)
				tx := begin(t, e)
				if err := tx.Set([]byte("k"), []byte("new")); err != nil {
					t.Fatal(err)
				}
				e.SetNow(tc.now)
				err := op.do(e, tx)
				if tc.down != errors.Is(err, storage.ErrUnavailable) || !tc.down && err != nil {
					t.Fatalf("%s = %v; want unavailable=%v", op.name, err, tc.down)
				}
				if op.name == "Commit" {
					want := map[bool]string{true: "orig", false: "new"}[tc.down]
					if got := latest(t, e, "k"); got != want {
						t.Errorf("k = %q; want %q", got, want)
					}
				}
			})
		}
	}
}

func TestReadFaults(t *testing.T) {
	tests := []struct {
		name    string
		op      OpKind
		kind    FaultKind
		wantErr error
	}{
		{"begin error", OpBegin, FaultError, ErrInjected},
		{"begin unavailable", OpBegin, FaultUnavailable, storage.ErrUnavailable},
		{"get error", OpGet, FaultError, ErrInjected},
		{"get unavailable", OpGet, FaultUnavailable, storage.ErrUnavailable},
		{"iter error", OpIter, FaultError, ErrInjected},
		{"iter unavailable", OpIter, FaultUnavailable, storage.ErrUnavailable},
		{"uncertain kinds are ignored on reads", OpGet, FaultUncertainApplied, nil},
		{"uncertain kinds are ignored on begin", OpBegin, FaultUncertainAppliedLater, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			put(t, e, "k", "v")
			e.SetInjector(InjectorFunc(func(op Op) Fault {
				if op.Kind == tc.op {
					return Fault{Kind: tc.kind, Delay: time.Second}
				}
				return Fault{}
			}))
			tx, err := e.Begin(t.Context())
			if tc.op == OpBegin {
				if tc.wantErr == nil && err != nil || !errors.Is(err, tc.wantErr) {
					t.Fatalf("Begin = %v; want %v", err, tc.wantErr)
				}
				if err != nil {
					return
				}
			} else if err != nil {
				t.Fatal(err)
			}
			switch tc.op {
			case OpGet:
				_, err = tx.Get([]byte("k"))
			case OpIter:
				_, err = tx.Iter(storage.IterOptions{})
			}
			if tc.op != OpBegin && (tc.wantErr == nil && err != nil || !errors.Is(err, tc.wantErr)) {
				t.Fatalf("%v = %v; want %v", tc.op, err, tc.wantErr)
			}
			// A failed read leaves the transaction usable.
			if err := tx.Set([]byte("k"), []byte("after")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatalf("Commit after a failed read: %v", err)
			}
			if got := tx.(*Txn).Delay(); got != time.Second {
				t.Errorf("Delay = %v; want 1s", got)
			}
		})
	}
}

func TestInjectorSeesCommitKeys(t *testing.T) {
	e := New()
	var got [][]byte
	e.SetInjector(InjectorFunc(func(op Op) Fault {
		if op.Kind == OpCommit {
			got = op.Keys
		}
		return Fault{}
	}))
	tx := begin(t, e)
	for _, k := range []string{"c", "a", "c"} {
		if err := tx.Set([]byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Delete([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Lock([]byte("b"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("commit keys = %q; want %q", got, want)
	}
}

func TestCanceledContext(t *testing.T) {
	e := New()
	tx := begin(t, e)
	if err := tx.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.Begin(ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Begin = %v; want ErrUnavailable", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Commit = %v; want ErrUnavailable", err)
	}
	if got := latest(t, e, "k"); got != "<none>" {
		t.Errorf("k = %q after a canceled commit", got)
	}
}

func TestRatesValidation(t *testing.T) {
	tests := []struct {
		name  string
		r     Rates
		panic bool
	}{
		{"zero", Rates{}, false},
		{"sum one", Rates{Error: 0.5, UncertainAppliedLater: 0.5}, false},
		{"sum above one", Rates{Error: 0.6, Unavailable: 0.6}, true},
		{"negative", Rates{Error: -0.1}, true},
		{"negative delay", Rates{MinDelay: -1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); (r != nil) != tc.panic {
					t.Errorf("panic = %v; want panic=%v", r, tc.panic)
				}
			}()
			NewRandomInjector(rand.New(rand.NewPCG(1, 2)), tc.r)
		})
	}
}

func TestRandomInjectorKinds(t *testing.T) {
	inj := NewRandomInjector(rand.New(rand.NewPCG(7, 7)), Rates{
		Error: 0.1, Unavailable: 0.1, UncertainNotApplied: 0.1, UncertainApplied: 0.1, UncertainAppliedLater: 0.1,
		MinDelay: time.Millisecond, MaxDelay: 3 * time.Millisecond, MaxApplyAfter: time.Second,
	})
	counts := map[OpKind]map[FaultKind]int{OpGet: {}, OpCommit: {}}
	for range 5000 {
		for op := range counts {
			f := inj.Inject(Op{Kind: op})
			counts[op][f.Kind]++
			if f.Delay < time.Millisecond || f.Delay > 3*time.Millisecond {
				t.Fatalf("Delay %v out of range", f.Delay)
			}
			if f.ApplyAfter < 0 || f.ApplyAfter > time.Second || (f.ApplyAfter != 0 && f.Kind != FaultUncertainAppliedLater) {
				t.Fatalf("ApplyAfter %v for %v", f.ApplyAfter, f.Kind)
			}
		}
	}
	for _, k := range []FaultKind{FaultUncertainNotApplied, FaultUncertainApplied, FaultUncertainAppliedLater} {
		if counts[OpGet][k] != 0 {
			t.Errorf("Get drew %v %d times", k, counts[OpGet][k])
		}
		if n := counts[OpCommit][k]; n < 350 || n > 650 {
			t.Errorf("Commit drew %v %d times of 5000 at rate 0.1", k, n)
		}
	}
	for _, k := range []FaultKind{FaultError, FaultUnavailable} {
		for op := range counts {
			if n := counts[op][k]; n < 350 || n > 650 {
				t.Errorf("%v drew %v %d times of 5000 at rate 0.1", op, k, n)
			}
		}
	}
}

// simulate drives the engine from one goroutine with a seeded workload and
// a seeded injector and returns a trace of every outcome.
func simulate(seed uint64) (trace []string, hash uint64) {
	e := New()
	e.SetInjector(NewRandomInjector(rand.New(rand.NewPCG(seed, 1)), Rates{
		Error: 0.03, Unavailable: 0.03, UncertainNotApplied: 0.05, UncertainApplied: 0.05, UncertainAppliedLater: 0.1,
		MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxApplyAfter: 2 * time.Second,
	}))
	e.SetUnavailable(30*time.Second, 31*time.Second)
	rng := rand.New(rand.NewPCG(seed, 2))
	key := func() []byte { return fmt.Appendf(nil, "k%d", rng.IntN(8)) }
	ctx := context.Background()
	var now time.Duration
	var held []*Txn
	logf := func(format string, args ...any) { trace = append(trace, fmt.Sprintf(format, args...)) }
	var open []storage.Txn // up to three interleaved transactions
	for step := range 6000 {
		now += time.Duration(rng.IntN(15)) * time.Millisecond
		e.SetNow(now)
		if len(open) == 0 || len(open) < 3 && rng.IntN(4) == 0 {
			tx, err := e.Begin(ctx)
			if err != nil {
				logf("%d begin: %v", step, err)
				continue
			}
			open = append(open, tx)
		}
		i := rng.IntN(len(open))
		tx := open[i]
		switch rng.IntN(6) {
		case 0:
			v, err := tx.Get(key())
			logf("%d get %q %v", step, v, err)
		case 1:
			_ = tx.Set(key(), fmt.Appendf(nil, "v%d", step))
		case 2:
			_ = tx.Delete(key())
		case 3:
			_ = tx.Lock(key())
		case 4:
			it, err := tx.Iter(storage.IterOptions{Lower: key(), Reverse: rng.IntN(2) == 0})
			if err != nil {
				logf("%d iter: %v", step, err)
				continue
			}
			for it.Next() {
				logf("%d row %q=%q", step, it.Key(), it.Value())
			}
			it.Close()
		case 5:
			open = slices.Delete(open, i, i+1)
			err := tx.Commit(ctx)
			mt := tx.(*Txn)
			logf("%d commit %v delay=%v outcome=%v ts=%d", step, err, mt.Delay(), mt.Outcome(), tx.StartTS())
			if mt.Outcome() == Undecided {
				held = append(held, mt)
			}
		}
	}
	for _, tx := range open {
		tx.Rollback()
	}
	e.SetNow(now + time.Hour)
	for _, tx := range held {
		logf("held outcome %v", tx.Outcome())
	}
	logf("pending %d", e.Pending())
	return trace, e.Hash()
}

func TestDeterminism(t *testing.T) {
	t1, h1 := simulate(42)
	t2, h2 := simulate(42)
	if h1 != h2 {
		t.Errorf("same seed, different hashes: %x vs %x", h1, h2)
	}
	if i := firstDiff(t1, t2); i >= 0 {
		t.Fatalf("same seed, traces differ at line %d:\n%s\n%s", i, t1[i], t2[i])
	}
	if t1[len(t1)-1] != "pending 0" {
		t.Errorf("trace ends with %q", t1[len(t1)-1])
	}
	kinds := 0
	for _, want := range []string{"outcome=applied", "outcome=not-applied", "outcome=undecided", "ErrInjected", "uncertain", "unavailable", "write conflict", "held outcome applied", "held outcome not-applied"} {
		for _, line := range t1 {
			if bytes.Contains([]byte(line), []byte(want)) || (want == "ErrInjected" && bytes.Contains([]byte(line), []byte(ErrInjected.Error()))) {
				kinds++
				break
			}
		}
	}
	if kinds != 9 {
		t.Errorf("the workload exercised only %d of 9 kinds of outcome", kinds)
	}
	t3, h3 := simulate(43)
	if h3 == h1 && firstDiff(t1, t3) < 0 {
		t.Errorf("different seeds gave identical runs")
	}
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestHash(t *testing.T) {
	a, b := New(), New()
	put(t, a, "x", "1")
	put(t, a, "y", "2")
	put(t, b, "y", "old")
	put(t, b, "z", "gone")
	tx := begin(t, b)
	_ = tx.Set([]byte("y"), []byte("2"))
	_ = tx.Set([]byte("x"), []byte("1"))
	_ = tx.Delete([]byte("z"))
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Errorf("same data, different hashes")
	}
	put(t, b, "x", "2")
	if a.Hash() == b.Hash() {
		t.Errorf("different data, same hash")
	}
	if New().Hash() == a.Hash() {
		t.Errorf("empty engine hashes like a full one")
	}
}

func BenchmarkCommit(b *testing.B) {
	e := New()
	ctx := b.Context()
	val := bytes.Repeat([]byte("v"), 100)
	for i := 0; b.Loop(); i++ {
		tx, err := e.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Set(fmt.Appendf(nil, "key%06d", i%10000), val); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSkipConflictCheck is the planted bug: a commit whose fault skips the
// conflict check lands over a newer commit of its keys (a lost update),
// now or when held for a delayed apply; without it, first committer wins.
func TestSkipConflictCheck(t *testing.T) {
	tests := []struct {
		name    string
		commit  Fault
		wantErr error // of the second commit
		wantK   string
	}{
		{"checked: first committer wins", Fault{}, storage.ErrConflict, "first"},
		{"skipped: the stale commit lands", Fault{SkipConflictCheck: true}, nil, "stale"},
		{"skipped on a delayed apply: it lands over the fence", Fault{Kind: FaultUncertainAppliedLater, ApplyAfter: time.Second, SkipConflictCheck: true}, storage.ErrUncertain, "stale"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			put(t, e, "k", "orig")
			stale := begin(t, e)
			if err := stale.Set([]byte("k"), []byte("stale")); err != nil {
				t.Fatal(err)
			}
			put(t, e, "k", "first")
			e.SetInjector(onCommit(tc.commit))
			if err := stale.Commit(t.Context()); !errors.Is(err, tc.wantErr) {
				t.Fatalf("Commit = %v; want %v", err, tc.wantErr)
			}
			e.SetInjector(nil)
			e.SetNow(time.Second)
			if got := latest(t, e, "k"); got != tc.wantK {
				t.Errorf("k = %q; want %q", got, tc.wantK)
			}
		})
	}
}

// TestStaleSnapshot is the planted bug of a stale start timestamp: a
// Begin whose fault says StaleBy n reads the store of n commits ago, so
// it misses what committed before it was called (all of it, as with a
// zero timestamp, when n reaches past the first commit). Its commit is
// still checked against that older snapshot: it conflicts with every
// write of its keys since, and a write of other keys lands above the
// latest commit.
func TestStaleSnapshot(t *testing.T) {
	tests := []struct {
		name      string
		staleBy   uint64
		wantK     string // k as the transaction reads it
		wantTS    uint64 // its StartTS: three commits are in the store
		wantWrite error  // of its write of k
	}{
		{"none: the latest commit", 0, "v3", 3, nil},
		{"one behind: the latest commit missed", 1, "v2", 2, storage.ErrConflict},
		{"two behind", 2, "v1", 1, storage.ErrConflict},
		{"past the first commit: the empty store", 99, "<none>", 0, storage.ErrConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New()
			for _, v := range []string{"v1", "v2", "v3"} {
				put(t, e, "k", v)
			}
			e.SetInjector(InjectorFunc(func(op Op) Fault {
				if op.Kind == OpBegin {
					return Fault{StaleBy: tc.staleBy}
				}
				return Fault{}
			}))
			read := func(tx *Txn) string {
				t.Helper()
				v, err := tx.Get([]byte("k"))
				if errors.Is(err, storage.ErrNotFound) {
					return "<none>"
				}
				if err != nil {
					t.Fatal(err)
				}
				return string(v)
			}
			tx := begin(t, e)
			if got := read(tx); got != tc.wantK || tx.StartTS() != tc.wantTS {
				t.Errorf("k = %q at StartTS %d; want %q at %d", got, tx.StartTS(), tc.wantK, tc.wantTS)
			}
			if err := tx.Set([]byte("k"), []byte("w")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(t.Context()); !errors.Is(err, tc.wantWrite) {
				t.Errorf("commit of k = %v; want %v", err, tc.wantWrite)
			}
			other := begin(t, e)
			if err := other.Set([]byte("other"), []byte("o")); err != nil {
				t.Fatal(err)
			}
			if err := other.Commit(t.Context()); err != nil {
				t.Fatalf("commit of another key: %v", err)
			}
			e.SetInjector(nil)
			want := uint64(4) // three puts and the other key
			if tc.wantWrite == nil {
				want++
			}
			if got := begin(t, e).StartTS(); got != want || latest(t, e, "other") != "o" {
				t.Errorf("a fresh snapshot is at %d with other = %q; want at %d with %q", got, latest(t, e, "other"), want, "o")
			}
		})
	}
}
