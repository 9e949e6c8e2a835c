package tikv

import (
	"context"
	"errors"

	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
	"github.com/tikv/pd/client/pkg/caller"
)

// tsoGuard is a PD client whose timestamp calls never hand the PD client
// a context that can end, and never return the zero timestamp.
//
// The PD client pools its timestamp requests. When a request's context
// ends just after the request was queued, the PD client answers the
// caller with the context's error and puts the request back in the pool,
// while the queued batch still holds it; the batch's answer then lands in
// the request's result channel after it was reused, and its next user
// gets the stale answer at once: a zero timestamp and no error, or
// another caller's earlier one. A transaction begun at zero reads an
// empty store; one begun at an old timestamp misses commits that
// returned before it began. Seen under axon serve's own deadlines (a
// leader's engine work runs under one): a leader read a latest record
// from its key cache and found no value for it in its snapshot.
//
// So the PD client gets a context that never ends, and the guard waits
// for the answer or the caller's context, whichever comes first; a
// request the caller stopped waiting for finishes in the PD client's own
// time (its TSO timeout) and goes back to the pool once. A zero timestamp
// is refused in any case, so that client-go retries.
type tsoGuard struct{ pd.Client }

// errZeroTS: the PD client answered a timestamp call with zero.
var errZeroTS = errors.New("tikv: PD client returned the zero timestamp")

func (g tsoGuard) WithCallerComponent(comp caller.Component) pd.Client {
	return tsoGuard{Client: g.Client.WithCallerComponent(comp)}
}

func (g tsoGuard) GetTS(ctx context.Context) (int64, int64, error) {
	return g.GetTSAsync(ctx).Wait()
}

func (g tsoGuard) GetTSAsync(ctx context.Context) tso.TSFuture {
	return guardedTS{f: g.Client.GetTSAsync(context.WithoutCancel(ctx)), ctx: ctx}
}

// GetLocalTS and GetLocalTSAsync are the PD client's deprecated names of
// GetTS and GetTSAsync.
func (g tsoGuard) GetLocalTS(ctx context.Context, _ string) (int64, int64, error) {
	return g.GetTS(ctx)
}

func (g tsoGuard) GetLocalTSAsync(ctx context.Context, _ string) tso.TSFuture {
	return g.GetTSAsync(ctx)
}

// guardedTS is a timestamp on its way, given up on when ctx ends.
type guardedTS struct {
	f   tso.TSFuture
	ctx context.Context
}

func (g guardedTS) Wait() (int64, int64, error) {
	if g.ctx.Done() == nil {
		return checkTS(g.f.Wait())
	}
	type answer struct {
		physical, logical int64
		err               error
	}
	ch := make(chan answer, 1)
	go func() {
		p, l, err := g.f.Wait()
		ch <- answer{p, l, err}
	}()
	select {
	case a := <-ch:
		return checkTS(a.physical, a.logical, a.err)
	case <-g.ctx.Done():
		return 0, 0, g.ctx.Err()
	}
}

func checkTS(physical, logical int64, err error) (int64, int64, error) {
	if err == nil && physical == 0 && logical == 0 {
		return 0, 0, errZeroTS
	}
	return physical, logical, err
}
