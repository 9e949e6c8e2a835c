package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// plainTxn hides memkv's Insert, as a transaction of an engine that
// cannot check at commit that a key is absent (Badger's).
type plainTxn struct{ storage.Txn }

// TestBufferNewKey: a New write commits only where the key is absent,
// whether the engine checks that (Inserter) or Buffer reads first.
func TestBufferNewKey(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		wrap func(storage.Txn) storage.Txn
	}{
		{"inserter", func(txn storage.Txn) storage.Txn { return txn }},
		{"read first", func(txn storage.Txn) storage.Txn { return plainTxn{txn} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := memkv.New()
			write := func() error {
				txn, err := eng.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer txn.Rollback()
				w := tc.wrap(txn)
				if err := driver.Buffer(w, []core.Write{{Key: []byte("k"), Value: []byte("v"), New: true}}); err != nil {
					return err
				}
				return w.Commit(ctx)
			}
			if err := write(); err != nil {
				t.Fatalf("first write: %v", err)
			}
			if err := write(); !errors.Is(err, storage.ErrConflict) {
				t.Fatalf("second write: %v; want ErrConflict", err)
			}
			if v, ok := eng.Peek([]byte("k")); !ok || string(v) != "v" {
				t.Errorf("k = %q, %v; want v", v, ok)
			}
		})
	}
}

// countingTxn is plainTxn counting its reads.
type countingTxn struct {
	storage.Txn
	gets int
}

func (c *countingTxn) Get(key []byte) ([]byte, error) {
	c.gets++
	return c.Txn.Get(key)
}

// TestBufferFreshKey: a Fresh New write costs an engine without Insert no
// read; Insert, where the engine has it, still checks it.
func TestBufferFreshKey(t *testing.T) {
	ctx := context.Background()
	eng := memkv.New()
	fresh := []core.Write{{Key: []byte("k"), Value: []byte("v"), New: true, Fresh: true}}
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	c := &countingTxn{Txn: txn}
	if err := driver.Buffer(c, fresh); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c.gets != 0 {
		t.Errorf("a fresh write read %d keys; want none", c.gets)
	}
	notFresh := []core.Write{{Key: []byte("k"), Value: []byte("w"), New: true}}
	txn2, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txn2.Rollback()
	c2 := &countingTxn{Txn: txn2}
	if err := driver.Buffer(c2, notFresh); !errors.Is(err, storage.ErrConflict) || c2.gets != 1 {
		t.Errorf("a New write over an existing key: %v after %d reads; want ErrConflict after one", err, c2.gets)
	}
	txn3, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txn3.Rollback()
	err = driver.Buffer(txn3, fresh)
	if err == nil {
		err = txn3.Commit(ctx)
	}
	if !errors.Is(err, storage.ErrConflict) {
		t.Errorf("Insert of an existing key marked Fresh: %v; want ErrConflict", err)
	}
	if v, _ := eng.Peek([]byte("k")); string(v) != "v" {
		t.Errorf("k = %q; want v", v)
	}
}

// TestSettled: work that failed, came late or writes nothing is over
// without a commit.
func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		eff     *core.Effects
		err     error
		out     core.Outcome
		settled bool
	}{
		{"failed", nil, errors.New("boom"), core.NotApplied, true},
		{"late", &core.Effects{Late: true, Writes: []core.Write{{Key: []byte("k")}}}, nil, core.NotApplied, true},
		{"no writes", &core.Effects{}, nil, core.Committed, true},
		{"writes", &core.Effects{Writes: []core.Write{{Key: []byte("k")}}}, nil, 0, false},
	} {
		if out, settled := driver.Settled(tc.eff, tc.err); out != tc.out || settled != tc.settled {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, out, settled, tc.out, tc.settled)
		}
	}
}

// TestOutcome: only an uncertain commit error leaves the outcome open.
func TestOutcome(t *testing.T) {
	for err, want := range map[error]core.Outcome{
		nil:                  core.Committed,
		storage.ErrConflict:  core.NotApplied,
		storage.ErrUncertain: core.Uncertain,
	} {
		if got := driver.Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %v; want %v", err, got, want)
		}
	}
}
