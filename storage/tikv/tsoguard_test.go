package tikv

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
)

// stubPD answers timestamp calls with a future that waits for release,
// and records whether it was ever handed a context that can end.
type stubPD struct {
	pd.Client
	release           chan struct{}
	physical, logical int64
	cancellable       atomic.Bool
	waits             atomic.Int64
}

func (s *stubPD) GetTSAsync(ctx context.Context) tso.TSFuture {
	if ctx.Done() != nil {
		s.cancellable.Store(true)
	}
	return stubFuture{s}
}

type stubFuture struct{ s *stubPD }

func (f stubFuture) Wait() (int64, int64, error) {
	<-f.s.release
	f.s.waits.Add(1)
	return f.s.physical, f.s.logical, nil
}

// TestTSOGuard: the PD client never gets a context that can end (its
// pooled request would be answered twice, a stale or zero timestamp
// reaching its next user); a caller whose context ends stops waiting at
// once, the PD client's answer is still taken once; a zero timestamp is
// an error.
func TestTSOGuard(t *testing.T) {
	s := &stubPD{release: make(chan struct{}), physical: 1700000000000, logical: 7}
	g := tsoGuard{Client: s}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := g.GetTS(ctx)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled caller got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled caller still waits for PD")
	}
	if s.cancellable.Load() {
		t.Error("the PD client was handed a context that can end")
	}
	close(s.release)
	p, l, err := g.GetTS(t.Context())
	if err != nil || p != s.physical || l != s.logical {
		t.Errorf("GetTS = %d, %d, %v", p, l, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.waits.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.waits.Load(); n != 2 {
		t.Errorf("the PD client's answers were taken %d times, want 2 (the abandoned one too)", n)
	}

	s.physical, s.logical = 0, 0
	if _, _, err := g.GetTS(context.Background()); !errors.Is(err, errZeroTS) {
		t.Errorf("a zero timestamp: %v, want errZeroTS", err)
	}
}
