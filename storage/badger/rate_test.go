package badger

import (
	"testing"
	"time"
)

func TestWriteRateCountsTheLastWindowOnly(t *testing.T) {
	var r writeRate
	t0 := time.Unix(1000, 0)
	r.add(t0, 4000)
	r.add(t0.Add(1500*time.Millisecond), 2000)
	if got := r.perSecond(t0.Add(time.Second)); got != 3000 {
		t.Errorf("rate over the first two seconds: %v B/s, want 3000", got)
	}
	// Two seconds on, the first second's bytes are out of the window
	// (and its bucket taken by the later second).
	r.add(t0.Add(2*time.Second), 1000)
	if got := r.perSecond(t0.Add(2 * time.Second)); got != 1500 {
		t.Errorf("rate after the window moved: %v B/s, want 1500", got)
	}
	if got := r.perSecond(t0.Add(10 * time.Second)); got != 0 {
		t.Errorf("rate seconds after the last write: %v B/s, want 0", got)
	}
}
