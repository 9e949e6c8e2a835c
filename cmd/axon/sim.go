package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/sim"
)

type simFlags struct {
	seed       uint64
	seeds      int
	first      uint64
	parallel   int
	ops        int
	breakDrift bool
	exclusive  bool
	plants     sim.Plants
	knobs      driver.TestingKnobs
	coreKnobs  core.TestingKnobs
	outDir     string
}

func simCmd() *cobra.Command {
	f := new(simFlags)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the deterministic simulator: one seed (--seed) or a swarm (--seeds)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.seeds > 0 {
				return simSwarm(cmd, *f)
			}
			return simOne(cmd, *f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// register defines the flags of axon sim on fl.
func (f *simFlags) register(fl *pflag.FlagSet) {
	fl.Uint64Var(&f.seed, "seed", 1, "the seed to run")
	fl.IntVar(&f.seeds, "seeds", 0, "run this many seeds, from --first on")
	fl.Uint64Var(&f.first, "first", 1, "first seed of a swarm")
	fl.IntVar(&f.parallel, "parallel", 2, "seeds run at once in a swarm")
	fl.IntVar(&f.ops, "ops", 1000, "client operations per seed before healing")
	fl.BoolVar(&f.exclusive, "exclusive", false, "run one exclusive node on a Badger-shaped engine, as axon serve does by default")
	fl.BoolVar(&f.breakDrift, "break-drift", false, "let one clock drift far past the bound leadership assumes (checks should fail)")
	fl.Float64Var(&f.plants.SkipConflictChecks, "skip-conflict-checks", 0, "plant a bug: each engine commit skips its conflict check with this probability (checks should fail)")
	for _, p := range f.switches() {
		fl.BoolVar(p.on, p.flag, false, "plant a bug: "+p.usage+" (checks should fail)")
	}
	fl.StringVar(&f.outDir, "out", "sim-failures", "where a failing seed writes its trace and history.html")
}

// plantSwitch is a plant that is on or off: its flag, what it breaks,
// and the knob it sets.
type plantSwitch struct {
	flag, usage string
	on          *bool
}

// switches lists the plants that are switches, in the order the flags
// and a replay command name them: one list, so that every plant has a
// flag and every replay command names every plant that was on.
func (f *simFlags) switches() []plantSwitch {
	p, k, c := &f.plants, &f.knobs, &f.coreKnobs
	return []plantSwitch{
		{"deal-eagerly", "deal every request a revision before knowing whether it writes", &k.DealEagerly},
		{"early-lease-gone", "answer a keepalive 'not found' while its lease's expiry is in flight", &k.EarlyLeaseGone},
		{"stale-auth-reads", "followers check reads against the auth store they loaded first", &k.StaleAuthReads},
		{"touching-spans-leave-gap", "a request allowed only by permissions that touch is denied", &k.Auth.TouchingSpansLeaveGap},
		{"keep-gen-on-failed-auth", "a failed auth change does not void the leader's auth loads under way", &k.KeepGenOnFailedAuth},
		{"skip-prev-reads", "the watch sender sends events without reading the previous values their writes left unread", &k.SkipPrevReads},
		{"retry-unknown-outcome", "the leader-call loop tries again a call whose answer may hide that it applied", &k.RetryUnknownOutcome},
		{"gap-at-resume", "a node's watch feed resumes on a new leader one revision past its hub's", &k.GapAtResume},
		{"learn-goes-back", "a member takes each answer's revision as the newest it learned, even one that arrives late", &k.LearnGoesBack},
		{"compactions-learned-late", "a hub hears of a compaction answered through its member only from its feed", &k.CompactionsLearnedLate},
		{"late-anchor-outputs", "what an anchoring hub answers the watches that waited for it goes out after what their streams send at once", &k.LateAnchorOutputs},
		{"read-point-unlearned", "a leader does not learn the commit point it serves reads at, so its serializable reads as a follower may go below them", &k.ReadPointUnlearned},
		{"progress-at-floor", "a progress answer on a stream whose hub is behind what a watch resumed there saw is raised to that", &k.ProgressAtFloor},
		{"progress-first-watch-only", "a RequestProgress answer waits for the stream's first watch alone to be synced", &k.ProgressFirstWatchOnly},
		{"cancel-keeps-watch", "a client's cancel of a watch is acknowledged but the watch stays", &k.CancelKeepsWatch},
		{"progress-at-committed", "progress notifications say the member's commit point, even for a watch still catching up or on a hub behind it", &k.ProgressAtCommitted},
		{"exhausted-keeps-latch", "a request that ran out of attempts keeps its latch", &c.ExhaustedKeepsLatch},
		{"compact-accepts-future", "a compaction past the commit point is stored, not refused", &c.CompactAcceptsFuture},
		{"compact-head-is-future", "a compaction to the commit point itself is refused as a future revision", &c.CompactHeadIsFuture},
		{"sweep-answered-early", "a physical compaction is answered before its sweep ran", &c.SweepAnsweredEarly},
		{"late-nested-compares", "a nested txn's compares see the writes before it in its branch", &c.LateNestedCompares},
		{"latch-misses-range-start", "a range's latch does not wait for the latch of a put of its first key", &c.LatchMissesRangeStart},
		{"mod-filters-exclusive", "a txn's range drops the keys modified at its min or max mod revision filter's bound", &c.ModFiltersExclusive},
		{"pages-count-only-read", "a paged range its limit ends counts only the keys it sent", &c.PagesCountOnlyRead},
		{"ignore-lease-detaches", "a put with ignore_lease detaches the key from its lease", &c.IgnoreLeaseDetaches},
		{"merge-skips-full-shards", "a catch-up read's merge of the revision-record shards takes a shard's full batch for all its records", &c.MergeSkipsFullShards},
		{"keep-keys-on-uncertain", "an uncertain commit leaves the key cache's entries of the keys it wrote", &k.KeepKeysOnUncertain},
		{"early-restart", "with --exclusive, a crashed node restarts while its commits may still land", &p.EarlyRestart},
		{"stale-snapshots", "some engine transactions begin at the snapshot of a few commits ago, missing commits made before their begin", &k.StaleSnapshots},
		{"nospace-misses-failure-branch", "while NOSPACE is raised, a txn whose puts are all in its failure branch is let through", &c.NoSpaceMissesFailureBranch},
		{"alarm-forgotten-on-recover", "a new leader starts without the stored NOSPACE alarm", &c.AlarmForgottenOnRecover},
		{"txn-ops-limit-off-by-one", "a txn of exactly --max-txn-ops operations is refused as too many", &c.TxnOpsLimitOffByOne},
		{"grant-replaces-lease", "a grant naming a live lease's ID replaces the lease instead of being refused", &c.GrantReplacesLease},
		{"revoke-unknown-answers-ok", "a revoke of a lease the leader does not hold is answered as done", &c.RevokeUnknownAnswersOK},
		{"lease-keeps-detached-keys", "a key put with another lease or none, or deleted, stays among its old lease's keys", &c.LeaseKeepsDetachedKeys},
		{"time-to-live-from-grant", "time-to-live counts a lease's remaining time from its grant, not its last keepalive", &c.TimeToLiveFromGrant},
		{"refuse-negative-lease-ids", "a grant naming a negative lease ID is refused 'lease not found'", &c.RefuseNegativeLeaseIDs},
		{"revision-reads-go-early", "a txn whose range names a revision dealt but not final goes out at once and may answer it future", &c.RevisionReadsGoEarly},
		{"compare-first-key-only", "a compare over a range holds when its first key passes it", &c.CompareFirstKeyOnly},
		{"txn-revision-reads-committed", "a txn's range at a revision reads at the commit point as of dealing", &c.TxnRevisionReadsCommitted},
		{"lease-compare-reads-version", "a compare of a key's lease compares with the compare's version field", &c.LeaseCompareReadsVersion},
		{"role-delete-leaves-users", "a role's delete leaves it on the users that had it", &k.Auth.RoleDeleteLeavesUsers},
		{"disable-keeps-seq", "an auth disable leaves the auth store's Seq as it was", &k.Auth.DisableKeepsSeq},
		{"open-ended-as-key", "a permission from a key on (range_end \\x00) is taken as its key alone", &k.Auth.OpenEndedAsKey},
	}
}

func (f simFlags) config(seed uint64, trace bool) sim.Config {
	return sim.Config{Seed: seed, Ops: f.ops, BreakDrift: f.breakDrift, Exclusive: f.exclusive, Plants: f.plants, Knobs: f.knobs, CoreKnobs: f.coreKnobs, Trace: trace}
}

func replayCommand(f simFlags, seed uint64) string {
	s := fmt.Sprintf("axon sim --seed %d --ops %d", seed, f.ops)
	if f.exclusive {
		s += " --exclusive"
	}
	if f.breakDrift {
		s += " --break-drift"
	}
	if f.plants.SkipConflictChecks > 0 {
		s += fmt.Sprintf(" --skip-conflict-checks %g", f.plants.SkipConflictChecks)
	}
	for _, p := range f.switches() {
		if *p.on {
			s += " --" + p.flag
		}
	}
	return s
}

// report writes a failing seed's trace and, with html, porcupine's
// visualisation (its search can take a while on long histories).
func report(cmd *cobra.Command, f simFlags, r sim.Result, html bool) {
	dir := filepath.Join(f.outDir, fmt.Sprintf("seed-%d", r.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return
	}
	// Rerun with the trace on: same seed, same run.
	full := sim.Run(f.config(r.Seed, true))
	trace := filepath.Join(dir, "trace.txt")
	var b []byte
	for _, l := range full.Trace {
		b = append(b, l...)
		b = append(b, '\n')
	}
	_ = os.WriteFile(trace, b, 0o644)
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "  trace: %s\n", trace)
	if html && full.Visualize != nil {
		html := filepath.Join(dir, "history.html")
		if err := full.Visualize(html); err == nil {
			fmt.Fprintf(out, "  history: %s\n", html)
		}
	}
	fmt.Fprintf(out, "  replay: %s\n", replayCommand(f, r.Seed))
}

func simOne(cmd *cobra.Command, f simFlags) error {
	r := sim.Run(f.config(f.seed, false))
	fmt.Fprintln(cmd.OutOrStdout(), r.Line())
	if r.Err != nil {
		report(cmd, f, r, true)
		return fmt.Errorf("seed %d failed", f.seed)
	}
	return nil
}

// progress reports a swarm's progress: on a terminal one line updated in
// place every 100 seeds; elsewhere (a CI log, a file) a line of its own
// at most every interval, and at the end, so that a long swarm's log
// stays short and readable.
type progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	total    int
	start    time.Time
	last     time.Time
	// open: a line on the terminal awaits its update (no newline yet).
	open bool
}

// progressInterval spaces a swarm's progress lines off a terminal.
const progressInterval = 10 * time.Second

func newProgress(w io.Writer, total int, start time.Time) *progress {
	return &progress{w: w, tty: isTerminal(w), interval: progressInterval, total: total, start: start, last: start}
}

// isTerminal tells whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// report says that n of the seeds ran, failed of them failing, at now.
// Calls come in the order of n.
func (p *progress) report(n, failed int, now time.Time) {
	done := n == p.total
	line := fmt.Sprintf("%d/%d seeds, %d failed, %.0f seeds/min", n, p.total, failed, float64(n)/now.Sub(p.start).Minutes())
	switch {
	case p.tty && (n%100 == 0 || done):
		fmt.Fprintf(p.w, "\r%s", line)
		p.open = !done
		if done {
			fmt.Fprintln(p.w)
		}
	case !p.tty && (done || now.Sub(p.last) >= p.interval):
		p.last = now
		fmt.Fprintln(p.w, line)
	}
}

// breakLine ends the line updated in place, before another is written.
func (p *progress) breakLine() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

func simSwarm(cmd *cobra.Command, f simFlags) error {
	start := time.Now()
	var (
		next     atomic.Uint64
		done     int
		failures []sim.Result
		ops      atomic.Int64
		mu       sync.Mutex
		wg       sync.WaitGroup
	)
	next.Store(f.first)
	last := f.first + uint64(f.seeds) - 1
	out := cmd.OutOrStdout()
	prog := newProgress(cmd.ErrOrStderr(), f.seeds, start)
	for range max(f.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed > last {
					return
				}
				r := sim.Run(f.config(seed, false))
				ops.Add(int64(r.Ops))
				mu.Lock()
				done++
				if r.Err != nil {
					failures = append(failures, r)
					prog.breakLine()
					fmt.Fprintln(out, r.Line())
				}
				prog.report(done, len(failures), time.Now())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Fprintf(out, "swarm: %d seeds (%d..%d) in %v: %d failed, %.0f seeds/min, %.0f client ops/s\n",
		f.seeds, f.first, last, el.Round(time.Millisecond), len(failures), float64(f.seeds)/el.Minutes(), float64(ops.Load())/el.Seconds())
	for i, r := range failures {
		if i == 3 {
			fmt.Fprintf(out, "(%d more failures not written)\n", len(failures)-3)
			break
		}
		fmt.Fprintln(out, r.Line())
		report(cmd, f, r, false)
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d seeds failed", len(failures), f.seeds)
	}
	return nil
}
