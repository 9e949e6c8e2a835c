package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// hotkey runs c clients that all increment one counter key by CAS, the
// way controllers contend for one object: Get k, then Txn If
// ModRevision(k)==m Then Put(k, v+1). A lost compare goes back to the Get;
// so does a failed or timed-out request, counted as an error (a timed-out
// Txn may still apply, so its outcome is unknown). One op is an increment,
// its latency from its first Get to the Txn that applied it. The key is new
// per row, and the row ends by checking it (checkCounter) against what it
// held before.
func (r *runner) hotkey(ctx context.Context, s *server, clis []*clientv3.Client, c int) error {
	row := r.rep.row(fmt.Sprintf("hotkey c=%d", c), Hotkey, c, 0, "increment")
	k := fmt.Sprintf("/bench/hot/%d", c)
	var tries, unknown atomic.Int64 // Get+Txn rounds of the finished increments; Txns without an answer
	fn := func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
		for n := int64(1); ; n++ {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			if time.Now().After(wk.deadline) {
				return false, errCutShort
			}
			ok, err := r.increment(ctx, cli, k, &unknown)
			if err != nil {
				wk.errs.add(err)
				continue
			}
			if ok {
				tries.Add(n)
				return false, nil
			}
		}
	}
	base, err := r.readCounter(ctx, clis[0], k)
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	r.log.Info("running "+row.Name, "increments", r.o.HotOps, "max-time", r.o.HotTime)
	wait := r.profile(s, row.Name, r.o.HotTime)
	// An increment stops retrying at the deadline; its last Get and Txn
	// may take their timeouts beyond it.
	res, err := r.timed(ctx, s, clis, c, r.o.HotOps, r.o.HotTime, r.o.HotTime+2*r.o.HotTimeout, fn)
	wait()
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	res.AttemptsPerOp = div(float64(tries.Load()), float64(res.Ops))
	r.checkCounter(ctx, clis[0], k, res, base, unknown.Load())
	r.record(row, res)
	return nil
}

// increment reads k's counter and tries to store its successor; ok
// reports that the Txn applied. unknown counts the Txns that got no answer.
func (r *runner) increment(ctx context.Context, cli *clientv3.Client, k string, unknown *atomic.Int64) (ok bool, err error) {
	gctx, cancel := context.WithTimeout(ctx, r.o.HotTimeout)
	g, err := cli.Get(gctx, k)
	cancel()
	if err != nil {
		return false, fmt.Errorf("get: %w", err)
	}
	v, m, err := counter(k, g)
	if err != nil {
		return false, err
	}
	tctx, cancel := context.WithTimeout(ctx, r.o.HotTimeout)
	defer cancel()
	t, err := cli.Txn(tctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", m)).
		Then(clientv3.OpPut(k, strconv.FormatInt(v+1, 10))).Commit()
	if err != nil {
		unknown.Add(1)
		return false, fmt.Errorf("txn: %w", err)
	}
	return t.Succeeded, nil
}

// counter is the value and ModRevision of the counter k in g; a missing
// key is 0 at revision 0.
func counter(k string, g *clientv3.GetResponse) (v, modRev int64, err error) {
	if len(g.Kvs) == 0 {
		return 0, 0, nil
	}
	kv := g.Kvs[0]
	v, err = strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("counter %s holds %q, not a number", k, kv.Value)
	}
	return v, kv.ModRevision, nil
}

// readCounter reads k's counter with a linearizable Get.
func (r *runner) readCounter(ctx context.Context, cli *clientv3.Client, k string) (int64, error) {
	gctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	g, err := cli.Get(gctx, k)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("read counter %s: %w", k, err)
	}
	v, _, err := counter(k, g)
	return v, err
}

// checkCounter reads k after a row that found it at base and records a
// violation (counterViolation) in res as one more error.
func (r *runner) checkCounter(ctx context.Context, cli *clientv3.Client, k string, res *Result, base, unknown int64) {
	v, err := r.readCounter(ctx, cli, k)
	if err != nil {
		res.Errors++
		if res.FirstError == "" {
			res.FirstError = "after the row: " + err.Error()
		}
		return
	}
	if res.Violation = counterViolation(k, v-base, res.Ops, unknown); res.Violation != "" {
		res.Errors++
		r.log.Error(res.Violation)
	}
}

// counterViolation judges the growth v of counter k over a row of acked
// acknowledged increments and unknown Txns of unknown outcome. Every
// applied Txn added exactly one, so v lies between acked and acked+unknown:
// below, an acknowledged update was lost; above, an increment applied twice
// or from nowhere. It returns "" when v is within.
func counterViolation(k string, v, acked, unknown int64) string {
	switch {
	case v < acked:
		return fmt.Sprintf("LOST UPDATE: %s grew by %d over %d acknowledged increments", k, v, acked)
	case v > acked+unknown:
		return fmt.Sprintf("%s grew by %d, more than %d acknowledged increments plus %d of unknown outcome", k, v, acked, unknown)
	}
	return ""
}
