package tikv

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/oracle"
	kvstore "github.com/tikv/client-go/v2/tikv"
	pd "github.com/tikv/pd/client"

	"github.com/axon-kv/axon/internal/tikvserver"
)

// endsOnSecondLook is a context that ends the second time it is asked
// whether it has: a caller that gives up while its call is on its way in,
// between the PD client queueing the request and its second look at the
// context, a window of nanoseconds made certain.
type endsOnSecondLook struct {
	context.Context
	mu    sync.Mutex
	looks int
	done  chan struct{}
}

func (c *endsOnSecondLook) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	if c.looks++; c.looks == 2 {
		close(c.done)
	}
	return c.done
}

func (c *endsOnSecondLook) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.looks >= 2 {
		return context.Canceled
	}
	return nil
}

// staleTimestamps gives up on timestamp calls right after making them, as
// work past its deadline does, and between them takes timestamps it waits
// for, counting those that are zero or not above one it took before.
func staleTimestamps(ctx context.Context, c pd.Client, calls int) (bad int, first string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var last uint64
			for i := 0; i < calls && ctx.Err() == nil; i++ {
				f := c.GetTSAsync(&endsOnSecondLook{Context: ctx})
				_, _, _ = f.Wait()
				p, l, err := c.GetTS(ctx)
				if err != nil {
					continue
				}
				ts := oracle.ComposeTS(p, l)
				if ts == 0 || ts <= last {
					mu.Lock()
					if bad++; first == "" {
						first = fmt.Sprintf("timestamp %d after %d", ts, last)
					}
					mu.Unlock()
				}
				last = max(last, ts)
			}
		})
	}
	wg.Wait()
	return bad, first
}

// TestTimestampsOfCallersThatGiveUp: against a PD-speaking endpoint, a
// caller that gives up on a timestamp call must not leave a stale answer
// for the next one. The PD client alone may (its pooled request is
// answered twice: tsoGuard); under tsoGuard no timestamp is zero or
// behind one its caller took before.
func TestTimestampsOfCallersThatGiveUp(t *testing.T) {
	srv, err := tikvserver.Start("127.0.0.1:0", tikvserver.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pdc, err := kvstore.NewPDClient([]string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pdc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const calls = 3000
	raw, rawFirst := staleTimestamps(ctx, pdc, calls)
	t.Logf("the PD client alone: %d of %d timestamps zero or stale (%s)", raw, 8*calls, rawFirst)
	// The PD client of an engine Open makes.
	e, err := Open(ctx, []string{srv.Addr()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if bad, first := staleTimestamps(ctx, e.c.store.GetPDClient(), calls); bad > 0 {
		t.Errorf("through Open's PD client: %d of %d timestamps zero or stale; first: %s", bad, 8*calls, first)
	}
}
