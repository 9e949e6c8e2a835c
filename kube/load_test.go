package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// op is one request of the fault load and what came of it.
type op struct {
	phase string
	read  bool
	what  string // "verb resource/name"
	name  string
	rv    int64 // of an acknowledged write
	err   error
}

// load is readers and a writer on one namespace's ConfigMaps, for the
// fault checks: two readers GET and LIST (from etcd and from the cache)
// every 20 ms, one writer creates a ConfigMap and patches it every 50 ms.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	e      *env

	mu  sync.Mutex
	ops []op
}

func startLoad(ctx context.Context, e *env, ns string) *load {
	// Requests run under ctx; stopping ends the loops between requests,
	// so that no request is cut off in flight.
	loop, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel, e: e}
	cms := e.cs.CoreV1().ConfigMaps(ns)
	for r := range 2 {
		l.wg.Go(func() {
			for i := 0; loop.Err() == nil; i++ {
				var err error
				what := "get configmaps/read-me"
				switch i % 3 {
				case 0:
					_, err = cms.Get(ctx, "read-me", metav1.GetOptions{})
				case 1:
					what = "list configmaps"
					_, err = cms.List(ctx, metav1.ListOptions{Limit: 50})
				case 2:
					what = "list configmaps rv=0"
					_, err = cms.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				}
				l.add(op{read: true, what: what, err: err})
				sleep(loop, 20*time.Millisecond+time.Duration(r)*5*time.Millisecond)
			}
		})
	}
	l.wg.Go(func() {
		for i := 0; loop.Err() == nil; i++ {
			name := fmt.Sprintf("w-%04d", i)
			cm, err := cms.Create(ctx, configMap(name, map[string]string{"v": "0"}), metav1.CreateOptions{})
			o := op{what: "create configmaps/" + name, name: name, err: err}
			if err == nil {
				o.rv = rvOf(cm)
			}
			l.add(o)
			sleep(loop, 25*time.Millisecond)
			if err != nil || loop.Err() != nil {
				continue
			}
			cm, err = cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"v":"1"}}`), metav1.PatchOptions{})
			o = op{what: "patch configmaps/" + name, name: name, err: err}
			if err == nil {
				o.rv = rvOf(cm)
			}
			l.add(o)
			sleep(loop, 25*time.Millisecond)
		}
	})
	return l
}

func (l *load) add(o op) {
	l.e.report.mu.Lock()
	o.phase = l.e.report.phase
	l.e.report.mu.Unlock()
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

// stop ends the load and returns every request it made.
func (l *load) stop() []op {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// leases renews Leases the way kubelets do: each holder updates its
// Lease's renewTime from the copy its last update returned, and on a
// conflict reads the Lease again.
type leases struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	e      *env

	mu       sync.Mutex
	renewals map[string]int
	last     map[string]*coordinationv1.Lease
	errors   []leaseError
}

type leaseError struct {
	phase string
	err   error
}

type leaseState struct {
	renewals map[string]int
	last     map[string]*coordinationv1.Lease
	errs     []string
	errors   []leaseError
}

func startLeases(ctx context.Context, e *env, ns string, n int, every time.Duration) *leases {
	loop, cancel := context.WithCancel(ctx) // as in startLoad
	l := &leases{cancel: cancel, e: e, renewals: map[string]int{}, last: map[string]*coordinationv1.Lease{}}
	api := e.cs.CoordinationV1().Leases(ns)
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		l.wg.Go(func() {
			now := metav1.NewMicroTime(time.Now())
			lease, err := api.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now,
				},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				lease, err = api.Get(ctx, name, metav1.GetOptions{})
			}
			if err != nil {
				l.fail(err)
				return
			}
			for loop.Err() == nil {
				sleep(loop, every+rand.N(every/2))
				if loop.Err() != nil {
					return
				}
				next := lease.DeepCopy()
				now := metav1.NewMicroTime(time.Now())
				next.Spec.RenewTime = &now
				updated, err := api.Update(ctx, next, metav1.UpdateOptions{})
				if err != nil {
					l.fail(err)
					if apierrors.IsConflict(err) {
						if got, err := api.Get(ctx, name, metav1.GetOptions{}); err == nil {
							lease = got
						}
					}
					continue
				}
				lease = updated
				l.mu.Lock()
				l.renewals[name]++
				l.last[name] = updated
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *leases) fail(err error) {
	l.e.report.mu.Lock()
	phase := l.e.report.phase
	l.e.report.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, leaseError{phase: phase, err: err})
}

func (l *leases) stop() leaseState {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := leaseState{renewals: l.renewals, last: l.last, errors: l.errors}
	for _, e := range l.errors {
		st.errs = append(st.errs, fmt.Sprintf("%s: %v", e.phase, e.err))
	}
	return st
}

// moveLeader hands the store's leadership from its leader to the next
// member with the etcd API (MemberList, then MoveLeader sent to the
// leader, as `etcdctl move-leader` does), and waits until it leads.
func moveLeader(ctx context.Context, c cluster, endpoints []string) (from, to int, took time.Duration, err error) {
	from, err = c.leader(10 * time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	to = (from + 1) % len(endpoints)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoints[from]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, 0, err
	}
	defer cli.Close()
	ms, err := cli.MemberList(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("member list: %w", err)
	}
	var target uint64
	for _, m := range ms.Members {
		if strings.HasSuffix(m.Name, fmt.Sprintf("-%d", to)) {
			target = m.ID
		}
	}
	if target == 0 {
		return 0, 0, 0, fmt.Errorf("no member named *-%d in %v", to, ms.Members)
	}
	began := time.Now()
	if _, err := cli.MoveLeader(ctx, target); err != nil {
		return 0, 0, 0, fmt.Errorf("move leader to %x: %w", target, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := c.leader(time.Second); err == nil && l == to {
			return from, to, time.Since(began), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, 0, 0, fmt.Errorf("member %d does not lead 10 s after MoveLeader", to)
}

// storeWrite is one key change the store's own watch reports.
type storeWrite struct {
	rev int64
	op  string
	key string
}

// history is what the store holds at revisions from..to.
type history struct {
	from, to int64
	writes   []storeWrite
	empty    []int64 // revisions that hold no write
}

func (h history) String() string {
	var keys []string
	for _, w := range h.writes {
		keys = append(keys, fmt.Sprintf("%s %s@%d", w.op, w.key, w.rev))
	}
	if h.to < h.from {
		return "no revisions"
	}
	return fmt.Sprintf("revisions %d..%d hold %d writes [%s]; revisions without a write: %v", h.from, h.to, len(h.writes), strings.Join(keys, ", "), h.empty)
}

func storeClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// storeRevision is the store's current revision.
func storeRevision(ctx context.Context, endpoints []string) (int64, error) {
	cli, err := storeClient(endpoints)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "compact_rev_key")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// readHistory reads the key changes at revisions from..to with an etcd
// watch on the store itself.
func readHistory(ctx context.Context, endpoints []string, from, to int64) (history, error) {
	h := history{from: from, to: to}
	if to < from {
		return h, nil
	}
	writes, err := watchHistory(ctx, endpoints, from, to)
	if err != nil {
		return h, err
	}
	h.writes = writes
	seen := map[int64]bool{}
	for _, w := range writes {
		seen[w.rev] = true
	}
	for r := from; r <= to; r++ {
		if !seen[r] {
			h.empty = append(h.empty, r)
		}
	}
	return h, nil
}

func watchHistory(ctx context.Context, endpoints []string, from, to int64) ([]storeWrite, error) {
	cli, err := storeClient(endpoints)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 10*time.Second)
	defer cancel()
	wch := cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from))
	go func() { // a progress notification says when all up to "to" came
		sleep(wctx, 300*time.Millisecond)
		_ = cli.RequestProgress(wctx)
	}()
	var out []storeWrite
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return out, err
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > to {
				return out, nil
			}
			out = append(out, storeWrite{rev: ev.Kv.ModRevision, op: ev.Type.String(), key: string(ev.Kv.Key)})
		}
		if resp.Header.Revision >= to && len(resp.Events) == 0 {
			return out, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	// No progress notification came in 10 s, but the store is at "to"
	// at least: the watch had the time to deliver everything.
	return out, nil
}

// revisionLog watches every key of the store for a whole setup and
// keeps the revisions that hold a write, to count the ones that hold
// none (etcd has none).
type revisionLog struct {
	cancel context.CancelFunc
	done   chan struct{}
	cli    *clientv3.Client
	tr     *requestTrace

	mu          sync.Mutex
	start, last int64
	seen        map[int64]time.Time // when each revision's event came
	err         error
}

func watchRevisions(endpoints []string, tr *requestTrace) (*revisionLog, error) {
	cli, err := storeClient(endpoints)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := cli.Get(ctx, "compact_rev_key")
	if err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	r := &revisionLog{cancel: cancel, done: make(chan struct{}), cli: cli, tr: tr, start: resp.Header.Revision + 1, seen: map[int64]time.Time{}}
	go func() {
		defer close(r.done)
		for resp := range cli.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(r.start)) {
			r.mu.Lock()
			if err := resp.Err(); err != nil && ctx.Err() == nil {
				r.err = err
			}
			now := time.Now()
			for _, ev := range resp.Events {
				r.seen[ev.Kv.ModRevision] = now
				r.last = max(r.last, ev.Kv.ModRevision)
			}
			r.mu.Unlock()
		}
	}()
	return r, nil
}

// stop ends the watch and says how many revisions held no write.
func (r *revisionLog) stop() string {
	r.cancel()
	<-r.done
	r.cli.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return fmt.Sprintf("store watch failed: %v", r.err)
	}
	var empty []int64
	for rev := r.start; rev <= r.last; rev++ {
		if _, ok := r.seen[rev]; !ok {
			empty = append(empty, rev)
		}
	}
	out := fmt.Sprintf("%d of the %d store revisions %d..%d hold no write", len(empty), r.last-r.start+1, r.start, r.last)
	if len(empty) > 0 && r.tr == nil {
		// No trace to name the requests: say when each came, by the
		// next write the watch saw, to match with the store's logs.
		var each []string
		for _, rev := range empty[:min(len(empty), 20)] {
			next := rev + 1
			for ; next <= r.last; next++ {
				if _, ok := r.seen[next]; ok {
					break
				}
			}
			each = append(each, fmt.Sprintf("%d (before %d, seen at %s)", rev, next, r.seen[next].Format("15:04:05.000")))
		}
		out += ": " + strings.Join(each, ", ")
	}
	if len(empty) > 0 && r.tr != nil {
		_, kinds := r.tr.explain(empty)
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
		}
		slices.Sort(ks)
		out += "; taken by: " + strings.Join(ks, "; ")
	}
	return out
}
