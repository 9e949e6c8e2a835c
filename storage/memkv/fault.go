package memkv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrInjected is the definite failure of FaultError: the operation failed
// and nothing was applied. It deliberately wraps none of the storage errors,
// so callers see an error they cannot classify as conflict, uncertain or
// unavailable — as with a real engine's unexpected failure.
var ErrInjected = errors.New("memkv: injected failure")

// OpKind names an engine operation an Injector is asked about.
type OpKind int

// Operations that consult the Injector.
const (
	OpBegin OpKind = iota + 1
	OpGet
	OpIter
	OpCommit
)

func (k OpKind) String() string {
	switch k {
	case OpBegin:
		return "begin"
	case OpGet:
		return "get"
	case OpIter:
		return "iter"
	case OpCommit:
		return "commit"
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op describes the operation about to run.
type Op struct {
	Kind OpKind
	// Keys: for Get the key; for Iter the lower and upper bound (either
	// may be nil); for Commit the written and locked keys, sorted and
	// without duplicates; for Begin nil. The Injector must not modify them.
	Keys [][]byte
}

// FaultKind is what goes wrong with an operation.
type FaultKind int

// Fault kinds; see the package documentation for their meaning.
const (
	FaultNone FaultKind = iota
	FaultError
	FaultUnavailable
	FaultUncertainNotApplied
	FaultUncertainApplied
	FaultUncertainAppliedLater
)

func (k FaultKind) String() string {
	switch k {
	case FaultNone:
		return "none"
	case FaultError:
		return "error"
	case FaultUnavailable:
		return "unavailable"
	case FaultUncertainNotApplied:
		return "uncertain-not-applied"
	case FaultUncertainApplied:
		return "uncertain-applied"
	case FaultUncertainAppliedLater:
		return "uncertain-applied-later"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Fault is an Injector's verdict on one operation.
type Fault struct {
	// Delay is virtual latency added to the transaction's Delay.
	Delay time.Duration
	Kind  FaultKind
	// ApplyAfter is, for FaultUncertainAppliedLater, how long after the
	// Commit call the held transaction is applied.
	ApplyAfter time.Duration
	// SkipConflictCheck plants a bug rather than a fault: the commit (now
	// or when a held one lands) applies even if a key of its write or lock
	// set was written or locked since its snapshot — as Badger did when
	// it dropped a snapshot from its conflict-tracking set before checking
	// the commit. Only on Commit; no Rates draw it. It exists so that a
	// test can prove the simulator finds the lost updates that follow.
	SkipConflictCheck bool
	// StaleBy plants a bug rather than a fault: Begin takes the snapshot
	// of StaleBy commits before the latest (the empty store before the
	// first commit, if there were fewer), as a transaction handed a stale
	// or zero start timestamp does. It breaks the contract that a
	// snapshot holds every transaction committed before Begin (and
	// StartTS goes back with it); the transaction is otherwise a sound
	// one of that older snapshot: its commit conflicts with every write
	// of its keys since, and takes a fresh timestamp. Only on Begin; no
	// Rates draw it. It exists so that a test can prove the simulator
	// finds the stale reads that follow.
	StaleBy uint64
}

// Injector decides the fault of each operation. The engine calls it with
// its mutex held: Inject must not call back into the engine.
type Injector interface {
	Inject(op Op) Fault
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op) Fault

// Inject calls f(op).
func (f InjectorFunc) Inject(op Op) Fault { return f(op) }

// Static returns an Injector that answers f for every operation. Because the
// uncertain kinds are ignored outside Commit, Static(Fault{Kind:
// FaultUncertainApplied}) affects only commits.
func Static(f Fault) Injector {
	return InjectorFunc(func(Op) Fault { return f })
}

// Rates are the probabilities with which NewRandomInjector picks each fault
// kind, and the range of latency it adds. The probabilities must be in
// [0, 1] and sum to at most 1; the rest is FaultNone. Only Error and
// Unavailable apply to Begin, Get and Iter.
type Rates struct {
	Error                 float64
	Unavailable           float64
	UncertainNotApplied   float64
	UncertainApplied      float64
	UncertainAppliedLater float64

	// Every operation gets a Delay drawn uniformly from [MinDelay, MaxDelay].
	MinDelay, MaxDelay time.Duration
	// A delayed apply happens uniformly in [0, MaxApplyAfter] after Commit.
	MaxApplyAfter time.Duration
}

func (r Rates) validate() error {
	sum := 0.0
	for _, p := range []float64{r.Error, r.Unavailable, r.UncertainNotApplied, r.UncertainApplied, r.UncertainAppliedLater} {
		if p < 0 || p > 1 {
			return fmt.Errorf("memkv: rate %v outside [0, 1]", p)
		}
		sum += p
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("memkv: rates sum to %v > 1", sum)
	}
	if r.MinDelay < 0 || r.MaxDelay < 0 || r.MaxApplyAfter < 0 {
		return errors.New("memkv: negative duration in rates")
	}
	return nil
}

// NewRandomInjector returns an Injector that draws every decision from rng,
// so that a given seed and sequence of operations always yields the same
// faults. It panics if r is invalid (a configuration bug).
func NewRandomInjector(rng *rand.Rand, r Rates) Injector {
	if err := r.validate(); err != nil {
		panic(err)
	}
	return &randomInjector{rng: rng, r: r}
}

type randomInjector struct {
	rng *rand.Rand
	r   Rates
}

func (ri *randomInjector) Inject(op Op) Fault {
	f := Fault{Delay: ri.r.MinDelay}
	if span := ri.r.MaxDelay - ri.r.MinDelay; span > 0 {
		f.Delay += time.Duration(ri.rng.Int64N(int64(span) + 1))
	}
	x := ri.rng.Float64()
	pick := func(p float64, k FaultKind) bool {
		if x < p {
			f.Kind = k
			return true
		}
		x -= p
		return false
	}
	switch {
	case pick(ri.r.Error, FaultError):
	case pick(ri.r.Unavailable, FaultUnavailable):
	case op.Kind != OpCommit:
	case pick(ri.r.UncertainNotApplied, FaultUncertainNotApplied):
	case pick(ri.r.UncertainApplied, FaultUncertainApplied):
	case pick(ri.r.UncertainAppliedLater, FaultUncertainAppliedLater):
		if ri.r.MaxApplyAfter > 0 {
			f.ApplyAfter = time.Duration(ri.rng.Int64N(int64(ri.r.MaxApplyAfter) + 1))
		}
	}
	return f
}
