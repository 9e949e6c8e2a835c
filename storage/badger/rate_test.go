package badger

import (
	"testing"
	"time"
)

func TestWriteRateCountsTheLastWindowOnly(t *testing.T) {
	var r writeRate
	t0 := time.Unix(1000, 0)
	r.add(t0, 5000)
	r.add(t0.Add(3*time.Second), 5000)
	r.add(t0.Add(9*time.Second+500*time.Millisecond), 10000)
	if got := r.perSecond(t0.Add(9*time.Second), rateWindow); got != 2000 {
		t.Errorf("rate over the first 10 s: %v B/s, want 2000", got)
	}
	// Eleven seconds on, the first second's bytes are out of the window
	// (and its bucket taken by a later second).
	r.add(t0.Add(10*time.Second), 1000)
	if got := r.perSecond(t0.Add(11*time.Second), rateWindow); got != 1600 {
		t.Errorf("rate after the window moved: %v B/s, want 1600", got)
	}
	if got := r.perSecond(t0.Add(11*time.Second), 2*time.Second); got != 500 {
		t.Errorf("rate over the last two seconds: %v B/s, want 500", got)
	}
	if got := r.perSecond(t0.Add(time.Minute), rateWindow); got != 0 {
		t.Errorf("rate a minute after the last write: %v B/s, want 0", got)
	}
}
