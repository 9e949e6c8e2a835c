package badger

import (
	"sync"
	"time"
)

// rateWindow is how far back writeRate looks: Defrag asks whether the
// writes still come, so the last two seconds.
const rateWindow = 2 * time.Second

// writeRate counts the bytes committed over the last rateWindow, in
// one-second buckets.
type writeRate struct {
	mu      sync.Mutex
	buckets [int(rateWindow / time.Second)]struct{ sec, bytes int64 }
}

// add counts n bytes committed at now.
func (r *writeRate) add(now time.Time, n int64) {
	sec := now.Unix()
	r.mu.Lock()
	b := &r.buckets[sec%int64(len(r.buckets))]
	if b.sec != sec {
		b.sec, b.bytes = sec, 0
	}
	b.bytes += n
	r.mu.Unlock()
}

// perSecond is the mean bytes per second committed over the whole
// seconds of the window up to now's.
func (r *writeRate) perSecond(now time.Time) float64 {
	secs := int64(len(r.buckets))
	sec := now.Unix()
	var sum int64
	r.mu.Lock()
	for _, b := range r.buckets {
		if b.sec > sec-secs && b.sec <= sec {
			sum += b.bytes
		}
	}
	r.mu.Unlock()
	return float64(sum) / float64(secs)
}
