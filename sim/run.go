package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// Run simulates one seed and checks its history.
func Run(cfg Config) Result {
	cfg = cfg.withDefaults()
	w := newWorld(cfg)
	w.plan = drawPlan(w)
	if w.plan.Auth {
		if err := w.setUpAuth(); err != nil {
			return Result{Seed: cfg.Seed, Err: err}
		}
	}
	w.eng.SetInjector(w.injector(memkv.NewRandomInjector(w.rng, w.plan.Engine)))
	for i := range cfg.Nodes {
		n := newNode(w, i)
		n.offset = w.between(-maxDrift/2, maxDrift/2)
		w.nodes = append(w.nodes, n)
	}
	if cfg.BreakDrift {
		// One node's clock runs far ahead: it believes leases expired
		// long before they did.
		w.nodes[cfg.Nodes-1].offset = 3 * leaseDuration
	}
	for i := range w.plan.Clients {
		c := &client{w: w, idx: i, kind: clientKind(i % 2), modRevs: map[string]int64{}, watcher: i < 4}
		c.authUser()
		w.clients = append(w.clients, c)
		w.after(w.between(0, 100*time.Millisecond), "start", c.issue)
	}
	w.scheduleFaults()
	err := w.runPhases()
	res := Result{Seed: cfg.Seed, VirtualTime: w.now, Ops: len(w.hist.calls), Faults: w.faults, Traffic: w.plan.traffic(), Trace: w.trace}
	if err == nil {
		err = w.violation
	}
	if err == nil {
		err = w.check(&res)
	}
	res.Err = err
	res.Hash = w.hash.Sum64()
	return res
}

// runPhases runs the faulty phase until the operation budget is spent,
// then heals every fault and waits for liveness.
func (w *World) runPhases() error {
	const faultyLimit = 10 * time.Minute
	for w.hist.issued < w.cfg.Ops || w.anyBusy() {
		if w.hist.issued >= w.cfg.Ops && !w.anyBusy() {
			break
		}
		if !w.step(faultyLimit) {
			return fmt.Errorf("faulty phase stalled at %v with %d ops issued", w.now, w.hist.issued)
		}
	}
	w.heal()
	deadline := w.now + 30*time.Second
	for !w.live() {
		if !w.step(deadline) {
			return fmt.Errorf("liveness: not every client finished within 30s after healing (%s)", w.describeNodes())
		}
	}
	w.stopped = true
	return nil
}

func (w *World) anyBusy() bool {
	for _, c := range w.clients {
		if c.cur != nil {
			return true
		}
	}
	return false
}

// live reports whether every client's final write after healing got a
// successful answer and every open watch has caught up to it.
func (w *World) live() bool {
	var final int64
	for _, c := range w.clients {
		if !c.final {
			return false
		}
		cl := w.hist.calls[len(w.hist.calls)-1]
		for _, x := range w.hist.calls {
			if x.client == c {
				cl = x
			}
		}
		if !cl.done {
			return false
		}
		if cl.status != answered || cl.err != nil {
			// Retry the final write until it succeeds.
			c.final = false
			c.cur = nil
			w.after(50*time.Millisecond, "final-retry", c.issue)
			return false
		}
		final = max(final, cl.rev)
	}
	for _, c := range w.clients {
		if c.watch != nil && (!c.watch.created || c.watch.lastRev < final) {
			return false
		}
	}
	return true
}

// heal ends every fault: nodes up, no partitions or pauses, engine
// faults off, clocks back within bounds.
func (w *World) heal() {
	w.healed = true
	w.note("heal")
	w.eng.SetInjector(w.injector(memkv.Static(memkv.Fault{})))
	w.plan.NetDrop = 0
	for _, n := range w.nodes {
		n.isolated = false
		n.pausedUntil = 0
		if n.up {
			continue
		}
		if d := n.crashed + w.downFor() - w.now; d > 0 {
			w.after(d, "restart", n.restart)
		} else {
			n.start()
		}
	}
	for _, c := range w.clients {
		if c.cur == nil {
			w.after(0, "final", c.issue)
		}
	}
}

func (w *World) describeNodes() string {
	s := ""
	for _, n := range w.nodes {
		s += fmt.Sprintf("[%s up=%v] ", core.DescribeMember(n.member), n.up)
	}
	return s
}

// crashNode crashes n, a fault of the given kind, and restarts it after
// restartDelay.
func (w *World) crashNode(kind string, n *node) {
	w.fault(kind, "%s", n.id())
	n.crash()
	w.after(w.restartDelay(), "restart", n.restart)
}

// downFor is how long a crashed node stays down at least. On an
// exclusive world, until every commit of its dead incarnation has landed
// or never will (the engine deadline, within which memkv applies a
// delayed commit): no other instance can reach the engine, so the new
// incarnation trusts that nothing it did not deal lands above what it
// recovers.
func (w *World) downFor() time.Duration {
	if w.cfg.Exclusive && !w.cfg.Plants.EarlyRestart {
		return engineDeadline
	}
	return 0
}

// restartDelay draws how long a crashed node stays down: at least
// downFor; with the planted EarlyRestart, within the time its delayed
// commits may still land in.
func (w *World) restartDelay() time.Duration {
	if w.cfg.Exclusive && w.cfg.Plants.EarlyRestart {
		return w.between(0, w.plan.Engine.MaxApplyAfter)
	}
	return max(w.between(100*time.Millisecond, 3*time.Second), w.downFor())
}

// scheduleFaults arms each fault kind of the plan.
func (w *World) scheduleFaults() {
	p := w.plan
	w.repeat(p.CrashEvery, "crash", func() {
		n := w.nodes[w.rng.IntN(len(w.nodes))]
		if !n.up {
			return
		}
		w.crashNode("crash", n)
	})
	w.repeat(p.PauseEvery, "pause", func() {
		n := w.nodes[w.rng.IntN(len(w.nodes))]
		d := w.between(100*time.Millisecond, 2*leaseDuration)
		w.fault("pause", "%s for %v", n.id(), d)
		n.pausedUntil = w.now + d
	})
	w.repeat(p.PartitionEvery, "partition", func() {
		n := w.nodes[w.rng.IntN(len(w.nodes))]
		d := w.between(200*time.Millisecond, 3*leaseDuration)
		w.fault("partition", "%s for %v", n.name, d)
		n.isolated = true
		w.after(d, "unpartition", func() { n.isolated = false })
	})
	w.repeat(p.TransferEvery, "transfer", func() {
		if w.chance(0.5) {
			w.transferOnCompact = true
			return
		}
		for _, n := range w.nodes {
			if n.up && n.member.Role() == core.Leader {
				n.transferAway()
				return
			}
		}
	})
	w.repeat(p.UnavailableEvery, "unavailable", func() {
		d := w.between(50*time.Millisecond, engineDeadline)
		w.fault("unavailable", "engine for %v", d)
		w.eng.SetUnavailable(w.now, w.now+d)
	})
	w.repeat(p.ClockJumpEvery, "clock", func() {
		n := w.nodes[w.rng.IntN(len(w.nodes))]
		if w.cfg.BreakDrift && n.idx == len(w.nodes)-1 {
			return
		}
		n.offset = w.between(-maxDrift/2, maxDrift/2)
		w.fault("clock", "%s offset %v", n.name, n.offset)
	})
}

// injector wraps the engine's fault source: it plants the skipped
// conflict check and the stale snapshots if the run asks for them
// (healing fixes faults, not bugs), fails the auth store's commits at
// the plan's AuthFaults, and counts the faults it decides, by kind.
func (w *World) injector(inj memkv.Injector) memkv.Injector {
	return memkv.InjectorFunc(func(op memkv.Op) memkv.Fault {
		f := inj.Inject(op)
		if op.Kind == memkv.OpCommit && w.chance(w.cfg.Plants.SkipConflictChecks) {
			f.SkipConflictCheck = true
			w.faults["skip-conflict-check"]++
		}
		if op.Kind == memkv.OpCommit && w.plan.AuthFaults > 0 && f.Kind == memkv.FaultNone && !w.healed && writesAuth(op.Keys) && w.chance(w.plan.AuthFaults) {
			f.Kind = []memkv.FaultKind{memkv.FaultUncertainApplied, memkv.FaultUncertainAppliedLater, memkv.FaultUncertainNotApplied}[w.rng.IntN(3)]
			f.ApplyAfter = w.between(0, w.plan.Engine.MaxApplyAfter)
		}
		if f.Kind != memkv.FaultNone && (op.Kind == memkv.OpCommit || f.Kind == memkv.FaultError || f.Kind == memkv.FaultUnavailable) {
			w.faults["engine-"+f.Kind.String()]++
		}
		return f
	})
}

// repeat runs fn at exponential-ish intervals of mean every until healed.
func (w *World) repeat(every time.Duration, what string, fn func()) {
	if every <= 0 {
		return
	}
	var loop func()
	loop = func() {
		if w.healed {
			return
		}
		fn()
		w.after(w.between(every/2, every*3/2), what, loop)
	}
	w.after(w.between(every/2, every*3/2), what, loop)
}

// final reads the final engine state: fn gets a snapshot and the State
// a new leader would recover from it.
func (w *World) final(fn func(rd storage.Reader, st core.State) error) error {
	txn, err := w.eng.Begin(context.Background())
	if err != nil {
		return err
	}
	return recovered(txn, fn)
}

// archive is final over the engine's archive: every revision and
// history record ever applied, also those a compaction sweep deleted.
func (w *World) archive(fn func(rd storage.Reader, st core.State) error) error {
	return recovered(w.eng.Archive(), fn)
}

// recovered runs fn over txn and the State recovered from it, then
// rolls txn back.
func recovered(txn storage.Txn, fn func(rd storage.Reader, st core.State) error) error {
	defer txn.Rollback()
	rd := storage.NewReader(txn)
	st, err := core.Recover(rd)
	if err != nil {
		return err
	}
	return fn(rd, st)
}

// committedEvents reads the ground truth: every applied revision's
// events, from the engine's archive.
func (w *World) committedEvents() (evs []core.Event, err error) {
	err = w.archive(func(rd storage.Reader, st core.State) (err error) {
		evs, _, err = core.ReadEvents(rd, 1, st.Committed, 0)
		return err
	})
	return evs, err
}

// leaseGone reports whether the engine holds no record of lease id.
func (w *World) leaseGone(id int64) (bool, error) {
	txn, err := w.eng.Begin(context.Background())
	if err != nil {
		return false, err
	}
	defer txn.Rollback()
	_, err = txn.Get(core.LeaseKey(id))
	if errors.Is(err, storage.ErrNotFound) {
		return true, nil
	}
	return false, err
}

// appliedRevision reports whether revision rev, as dealt in term, is
// applied in the engine.
func (w *World) appliedRevision(rev, term int64) (bool, error) {
	txn := w.eng.Archive()
	defer txn.Rollback()
	v, err := txn.Get(core.RevisionKey(rev))
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rec, err := core.DecodeRevisionRecord(v)
	return err == nil && !rec.Fenced && rec.Term == term, err
}
