package tikv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
	"github.com/tikv/pd/client/pkg/caller"

	"github.com/axon-kv/axon/storage"
)

// gate holds every timestamp call while its channel is open (unclosed).
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) wait() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

func (g *gate) set(ch chan struct{}) {
	g.mu.Lock()
	g.ch = ch
	g.mu.Unlock()
}

type gatePD struct {
	pd.Client
	g *gate
}

func (c *gatePD) WithCallerComponent(comp caller.Component) pd.Client {
	return &gatePD{Client: c.Client.WithCallerComponent(comp), g: c.g}
}

func (c *gatePD) GetTS(ctx context.Context) (int64, int64, error) {
	select {
	case <-c.g.wait():
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return c.Client.GetTS(ctx)
}

func (c *gatePD) GetTSAsync(ctx context.Context) tso.TSFuture {
	return &gateFuture{TSFuture: c.Client.GetTSAsync(ctx), ctx: ctx, open: c.g.wait()}
}

type gateFuture struct {
	tso.TSFuture
	ctx  context.Context
	open chan struct{}
}

func (f *gateFuture) Wait() (int64, int64, error) {
	select {
	case <-f.open:
	case <-f.ctx.Done():
		return 0, 0, f.ctx.Err()
	}
	return f.TSFuture.Wait()
}

// TestALeadersReadsNeedNoTimestamp: a transaction begun with
// storage.WithLeaderSnapshot reads, before it writes, at the newest
// timestamp the engine has seen, so its reads do not wait for PD; they
// see every commit that returned before Begin; its writes and commit wait
// for its own start timestamp, and one that cannot get it fails
// definitely.
func TestALeadersReadsNeedNoTimestamp(t *testing.T) {
	g := &gate{ch: make(chan struct{})}
	close(g.ch) // open while the key is written
	eng := newMock(t, MockOptions{WrapPD: func(c pd.Client) pd.Client { return &gatePD{Client: c, g: g} }})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	put := func(k, v string) {
		t.Helper()
		tx, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Set([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	put("a", "2") // the commit that returned last
	held := make(chan struct{})
	g.set(held) // PD stops answering

	tx, err := eng.Begin(storage.WithLeaderSnapshot(ctx))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tx.(storage.BatchReader).ReadBatch([]storage.Read{{Key: []byte("a")}, {Key: []byte("a"), Upper: []byte("b"), Last: true}})
	if err != nil {
		t.Fatalf("ReadBatch with PD held: %v", err)
	}
	if !got[0].Found || string(got[0].Value) != "2" || string(got[1].Value) != "2" {
		t.Fatalf("a leader's read sees %+v; want the last committed value 2", got)
	}
	tx.Rollback()

	// A write waits for the start timestamp; without it, it fails
	// definitely and nothing is applied.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	tx, err = eng.Begin(storage.WithLeaderSnapshot(short))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Set([]byte("a"), []byte("3")); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Set with no start timestamp: %v; want ErrUnavailable", err)
	}
	tx.Rollback()

	close(held) // PD answers again
	tx, err = eng.Begin(storage.WithLeaderSnapshot(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Set([]byte("a"), []byte("4")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantLatestValue(t, eng, "a", "4")
}

func wantLatestValue(t *testing.T, eng storage.Engine, k, want string) {
	t.Helper()
	tx, err := eng.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	v, err := tx.Get([]byte(k))
	if err != nil || string(v) != want {
		t.Fatalf("%s = %q, %v; want %q", k, v, err, want)
	}
}
