package core

// Allowance bounds the memory one read's answer holds. The server gives
// each read one, drawn from a budget the reads in flight share; core
// reports what it copies into the answer as it goes (keys as it finds
// them, values as it reads them), and the call blocks while the budget is
// spent, so a list that would break it waits between batches instead of
// growing. Core stays pure: the waiting is the driver's, as a Reader's IO is.
type Allowance interface {
	// Hold adds n bytes to what the read holds and returns once the read
	// may hold more, or an error if it may not go on (its request was
	// canceled).
	Hold(n int) error
}

// tallyBatch is how many bytes a read copies between calls to its
// Allowance: few enough calls that a list of millions of keys takes no
// lock per key, small enough that the batches the reads in flight copy
// past a spent budget are a rounding error beside it.
const tallyBatch = 256 << 10

// tallyMin is the smallest answer a read reports at all: a point read or
// a page of a few keys never waits, nor takes the budget's lock.
const tallyMin = 16 << 10

// kvOverhead approximates the memory of one answered key-value besides
// its key and value bytes (the KeyValue and its place in the answer).
const kvOverhead = 96

// tally batches a read's reports to its Allowance. A nil tally (no
// Allowance) holds nothing.
type tally struct {
	mem      Allowance
	pending  int
	reported bool
}

func newTally(mem Allowance) *tally {
	if mem == nil {
		return nil
	}
	return &tally{mem: mem}
}

// add counts n more bytes held and reports them once a batch is full.
func (t *tally) add(n int) error {
	if t == nil {
		return nil
	}
	if t.pending += n; t.pending < tallyBatch {
		return nil
	}
	return t.flush()
}

// flush reports what add has counted and not yet reported, unless the
// whole answer is under tallyMin.
func (t *tally) flush() error {
	if t == nil || t.pending == 0 || (!t.reported && t.pending < tallyMin) {
		return nil
	}
	n := t.pending
	t.pending, t.reported = 0, true
	return t.mem.Hold(n)
}
