package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCode is the gRPC code a client saw: what decides whether it
// retries (etcd's clients retry Unavailable and ResourceExhausted).
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.As(err, &ee):
		return ee.Code()
	}
	return status.Code(err)
}

// serverGone labels the errors of requests the server died under.
const serverGone = "server gone"

// codeTally counts errors by gRPC code and keeps the first one's text.
type codeTally struct {
	mu    sync.Mutex
	n     map[string]int64
	first string
}

func (t *codeTally) add(err error) { t.addKey(grpcCode(err).String(), err) }

// addAt counts err under "step code".
func (t *codeTally) addAt(step string, err error) {
	t.addKey(step+" "+grpcCode(err).String(), fmt.Errorf("%s: %w", step, err))
}

// addKey counts err under key, whatever its code.
func (t *codeTally) addKey(key string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int64{}
	}
	t.n[key]++
	if t.first == "" {
		t.first = err.Error()
	}
}

// total and byCode read the tally once no more are added.
func (t *codeTally) total() int64 {
	var n int64
	for _, v := range t.n {
		n += v
	}
	return n
}

func (t *codeTally) byCode() map[string]int64 { return maps.Clone(t.n) }

// fmtCodes renders counts by code: "Unavailable 30, DeadlineExceeded 2".
func fmtCodes(n map[string]int64) string {
	keys := slices.Sorted(maps.Keys(n))
	slices.SortStableFunc(keys, func(a, b string) int { return int(n[b] - n[a]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// memSampler samples a process's peak RSS (VmHWM) and CPU time while it
// lives: the kernel's figures are gone with a process it OOM-kills.
type memSampler struct {
	peak atomic.Int64
	// anon is the highest RssAnon sampled: the process's own memory,
	// without the file pages it maps (page cache the kernel may reclaim).
	anon atomic.Int64
	cpu  atomic.Uint64 // float64 bits of the last CPU seconds read
	stop chan struct{}
	done chan struct{}
}

func sampleMemory(pid int, every time.Duration) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	read := func() {
		if st, err := procStatus(pid); err == nil {
			m.peak.Store(max(m.peak.Load(), int64(st.VmHWM)))
			m.anon.Store(max(m.anon.Load(), int64(st.RssAnon)))
		}
		if c, err := procCPU(pid); err == nil {
			m.cpu.Store(math.Float64bits(c))
		}
	}
	read()
	go func() {
		defer close(m.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				read()
				return
			case <-t.C:
				read()
			}
		}
	}()
	return m
}

// finish stops the sampling and returns the highest VmHWM seen.
func (m *memSampler) finish() int64 {
	select {
	case <-m.done:
	default:
		close(m.stop)
		<-m.done
	}
	return m.peak.Load()
}

// anonPeak is the highest RssAnon sampled so far.
func (m *memSampler) anonPeak() int64 { return m.anon.Load() }

// cpuSec is the server's CPU seconds at the last sample.
func (m *memSampler) cpuSec() float64 { return math.Float64frombits(m.cpu.Load()) }

// ack is one acknowledged write: when it was sent, counted from the
// load's start, how long it took, and what it wrote at which revision.
type ack struct {
	at, took time.Duration
	key      string
	rev      int64
}

// writeLoad is clients creating fresh keys under a prefix (the
// apiserver's create: Txn If ModRevision(k)==0 Then Put) until stopped,
// MaxWrites are done, or the deadline passes.
type writeLoad struct {
	start  time.Time
	acks   [][]ack // per writer
	errs   codeTally
	halt   atomic.Bool // no more sends; those in flight finish
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startWrites starts n writers on clis; writer g's write i creates
// key(g, i), which must be new.
func (r *runner) startWrites(ctx context.Context, clis []*clientv3.Client, n int, key func(g, i int) string, deadline time.Time) *writeLoad {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	w := &writeLoad{start: time.Now(), acks: make([][]ack, n), cancel: cancel}
	var next atomic.Int64
	for g := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			wk := newWorker(2<<20+g, r.o.Scale.ListObjectSize)
			cli := clis[g%len(clis)]
			for i := 0; ctx.Err() == nil && !w.halt.Load() && next.Add(1) <= int64(r.o.Scale.MaxWrites); i++ {
				octx, c := context.WithTimeout(ctx, r.o.OpTimeout)
				t0 := time.Now()
				k := key(g, i)
				resp, err := cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, wk.value())).Commit()
				took := time.Since(t0)
				c()
				switch {
				case err != nil && ctx.Err() != nil:
					return // stopped, not failed
				case err != nil:
					w.errs.add(err)
					time.Sleep(10 * time.Millisecond) // a dead server answers at once
				case !resp.Succeeded:
					w.errs.add(fmt.Errorf("%s exists already", k))
				default:
					w.acks[g] = append(w.acks[g], ack{at: t0.Sub(w.start), took: took, key: k, rev: resp.Header.Revision})
				}
			}
		}()
	}
	return w
}

// finish stops the writers and returns every ack, in send order. Writes
// in flight end on their own, so that those a dying server drops count
// as the errors their clients saw.
func (w *writeLoad) finish() []ack {
	w.halt.Store(true)
	w.wg.Wait()
	w.cancel()
	all := slices.Concat(w.acks...)
	slices.SortFunc(all, func(a, b ack) int { return int(a.at - b.at) })
	return all
}

// latencies are the took of acks sent in [from, to).
func latencies(acks []ack, from, to time.Duration) []time.Duration {
	var ds []time.Duration
	for _, a := range acks {
		if a.at >= from && a.at < to {
			ds = append(ds, a.took)
		}
	}
	return ds
}
