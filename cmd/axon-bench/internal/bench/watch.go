package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// deliveryGrace bounds the wait for events after the last write.
const deliveryGrace = 30 * time.Second

// watch runs n watchers on a prefix with prev_kv while writer creates
// WatchEvents keys at WatchRate. Delivery latency runs from the write's
// ack to a watcher receiving the event; an event that arrives before the
// writer saw its ack counts as 0.
func (r *runner) watch(ctx context.Context, s *server, writer *clientv3.Client, n int) error {
	row := r.rep.row(fmt.Sprintf("watch w=%d", n), Watch, 0, n, "event delivered")
	prefix := fmt.Sprintf("/bench/watch/w%d/", n)
	key := keyFunc(prefix)
	events := r.o.WatchEvents
	// Watchers get connections of their own, so that the writer's requests
	// do not queue behind their streams.
	wclis, err := dialN(s, min(r.o.Conns, n))
	if err != nil {
		return err
	}
	defer closeAll(wclis)

	base := time.Now()
	since := func() int64 { return int64(time.Since(base)) + 1 } // 0 means never
	recv := make([][]int64, n)                                   // recv[watcher][seq]
	ack, sent := make([]int64, events), make([]int64, events)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		delivered, target atomic.Int64
		errs              tally
		allOnce           sync.Once
		wg                sync.WaitGroup
		all               = make(chan struct{})
		created           = make(chan struct{}, 2*n)
	)
	target.Store(int64(n * events))
	check := func(d int64) {
		if d >= target.Load() {
			allOnce.Do(func() { close(all) })
		}
	}
	fail := errs.add
	r.log.Info("running "+row.Name, "events", events, "rate", r.o.WatchRate)
	for j := range n {
		recv[j] = make([]int64, events)
		ch := wclis[j%len(wclis)].Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range ch {
				now := since()
				if wr.Created {
					select {
					case created <- struct{}{}:
					default: // a second notice after a reconnect
					}
					continue
				}
				if err := wr.Err(); err != nil {
					if wctx.Err() == nil {
						fail(fmt.Errorf("watcher %d: %w", j, err))
					}
					continue
				}
				for _, ev := range wr.Events {
					seq, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), prefix))
					if err != nil || seq < 0 || seq >= events || ev.Type != clientv3.EventTypePut {
						fail(fmt.Errorf("watcher %d: unexpected event %s %q", j, ev.Type, ev.Kv.Key))
						continue
					}
					if recv[j][seq] != 0 {
						continue // sent again after a reconnect
					}
					recv[j][seq] = now
					check(delivered.Add(1))
				}
			}
		}()
	}
	stop := stopWatchers(cancel, &wg, row.Name)
	timeout := time.After(readyTimeout)
	for range n {
		select {
		case <-created:
		case <-timeout:
			_ = stop()
			return fmt.Errorf("%s: watchers not created within %v", row.Name, readyTimeout)
		case <-ctx.Done():
			_ = stop()
			return ctx.Err()
		}
	}

	u, err := startUsage(s.pid())
	if err != nil {
		_ = stop()
		return err
	}
	wk := newWorker(1<<30, r.o.ValueSize)
	tick := time.NewTicker(time.Second / time.Duration(r.o.WatchRate))
	defer tick.Stop()
	deadline := time.Now().Add(r.o.MaxTime)
	start, written := since(), 0
	for seq := range events {
		if seq > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				_ = stop()
				return ctx.Err()
			}
		}
		if time.Now().After(deadline) {
			break
		}
		k := key(seq)
		octx, c := context.WithTimeout(ctx, r.o.OpTimeout)
		sent[seq] = since()
		resp, err := writer.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, wk.value())).Commit()
		c()
		if err == nil && !resp.Succeeded {
			err = fmt.Errorf("%s exists already", k)
		}
		if err != nil {
			fail(fmt.Errorf("writer: %w", err))
			continue
		}
		ack[seq] = since()
		written++
	}
	writeEnd := since()
	target.Store(int64(n * written))
	check(delivered.Load())
	select {
	case <-all:
	case <-time.After(deliveryGrace):
	case <-ctx.Done():
		_ = stop()
		return ctx.Err()
	}
	res := &Result{Ops: delivered.Load()}
	if err := u.finish(res); err != nil {
		_ = stop()
		return err
	}
	if err := stop(); err != nil {
		return err
	}

	var (
		lat      = make([]time.Duration, 0, n*written)
		fromSend = make([]time.Duration, 0, n*written)
		last     int64
	)
	for j := range n {
		for seq, t := range recv[j] {
			if t == 0 {
				continue
			}
			last = max(last, t)
			if ack[seq] != 0 {
				lat = append(lat, time.Duration(max(t-ack[seq], 0)))
				fromSend = append(fromSend, time.Duration(t-sent[seq]))
			}
		}
	}
	if missing := int64(n*written) - res.Ops; missing > 0 {
		fail(fmt.Errorf("%d events not delivered within %v of the last write", missing, deliveryGrace))
		errs.n.Add(missing - 1)
	}
	res.Errors, res.FirstError = errs.n.Load(), errs.first
	res.Seconds = time.Duration(last - start).Seconds()
	res.OpsPerSec = div(float64(res.Ops), res.Seconds)
	res.WriteRate = div(float64(written), time.Duration(writeEnd-start).Seconds())
	res.setLatency(lat)
	res.FromSendP50Ms, res.FromSendP99Ms = p50p99(fromSend)
	r.record(row, res)
	return r.alive(s)
}

// stopWatchers returns what ends watchers: cancel their context, then
// wait for wg, at most deliveryGrace (what names them in the error).
func stopWatchers(cancel context.CancelFunc, wg *sync.WaitGroup, what string) func() error {
	return func() error {
		cancel()
		exited := make(chan struct{})
		go func() { wg.Wait(); close(exited) }()
		select {
		case <-exited:
			return nil
		case <-time.After(deliveryGrace):
			return fmt.Errorf("%s: watchers did not stop", what)
		}
	}
}
