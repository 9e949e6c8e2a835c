package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/internal/cgroup"
)

// Scale scenarios: where etcd is known to break.
const (
	ScaleLists = "lists" // unpaginated LISTs of a large prefix under writes, in a memory cgroup
	ScaleStorm = "storm" // thousands of clients reconnect at once: list, then watch
	ScaleChurn = "churn" // long create/update/delete with compactions, then a defragmentation
	ScaleKeys  = "keys"  // millions of keys: load, gets, lists, compaction, restart, memory, disk
)

// AllScales lists the scale scenarios in run order.
var AllScales = []string{ScaleLists, ScaleStorm, ScaleChurn, ScaleKeys}

// ScaleOptions configures the scale scenarios; Options.Scale holds them.
type ScaleOptions struct {
	// Scenarios to run; empty runs none (the ordinary workloads run).
	Scenarios []string
	// MemoryLimit is the memory cgroup limit of each server in bytes; 0
	// runs the servers outside any cgroup.
	MemoryLimit int64
	// Before is how long writes run before the expensive part starts: the
	// write p99 it is compared with.
	Before time.Duration
	// MaxTime bounds each system's expensive part; what has not finished
	// by then counts as unfinished.
	MaxTime time.Duration
	Writers int // concurrent writers during the expensive part
	// Quota is the backend quota of both systems in churn, and etcd's in
	// keys (Axon runs without one there): etcd's recommended maximum, 8
	// GiB, since the default 2 GiB of both stops a churn of 100k objects
	// at a few thousand writes/s within minutes (NOSPACE) once the
	// history of a 5-minute window outgrows it.
	Quota int64
	// MaxWrites bounds the writes of one system's scenario (churn's
	// included).
	MaxWrites int

	ListObjects    int // objects in the listed prefix
	ListObjectSize int // bytes per object, and per write
	Listers        int // concurrent unpaginated lists
	ListRounds     int // lists per lister

	StormClients int // clients that connect at once
	StormObjects int // objects in each client's namespace
	// StormAfter is how long writes go on once every client is in (or
	// the bound passed): the time write p99 has to recover in.
	StormAfter time.Duration
	// StormUnwatched makes the storm a control: the writers create
	// outside the storm's namespaces, so its watchers get no event and
	// whatever keeps write p99 up after it is the storm's own doing, not
	// the lasting work of delivering an event per write.
	StormUnwatched bool

	ChurnObjects int           // objects churned
	ChurnTime    time.Duration // how long, before the defragmentation
	ChurnWindow  time.Duration // compaction interval, and the window of the figures
	// ChurnWatch also runs a kube-apiserver-like watcher: one watch with
	// prev_kv over the whole churned prefix, reading every event and
	// checking the values and prev_kv of a sample of the writes.
	ChurnWatch bool

	KeysCounts    []int // key counts measured at, ascending
	KeysNamespace int   // objects per namespace, the LIST measured
	KeysGets      int   // point gets per count (also bounded by MaxTime of Options)
	KeysLists     int   // namespace lists per count (idem)
	// KeysMemoryLimit is the memory cgroup limit of the keys scenario's
	// server in bytes (0: outside any cgroup). Apart from MemoryLimit: a
	// store of millions of keys is judged in a larger group (4 GiB), where
	// the page cache cannot hold its tables.
	KeysMemoryLimit int64
}

// DefaultScale is the full configuration (the figures in BENCHMARKS.md).
func DefaultScale() ScaleOptions {
	return ScaleOptions{
		MemoryLimit:    1 << 30,
		Before:         10 * time.Second,
		MaxTime:        5 * time.Minute,
		Writers:        64,
		MaxWrites:      20000000,
		ListObjects:    100000,
		ListObjectSize: 1024,
		Listers:        16,
		ListRounds:     2,
		StormClients:   5000,
		StormObjects:   10,
		StormAfter:     time.Minute,
		ChurnObjects:   100000,
		ChurnTime:      30 * time.Minute,
		ChurnWindow:    5 * time.Minute,
		KeysCounts:     []int{100000, 1000000, 3000000, 10000000}, // 100k: the base the goals compare with
		KeysNamespace:  10000,
		Quota:          8 << 30,
		KeysGets:       20000,
		KeysLists:      20,
	}
}

// QuickScale runs each scenario in well under a minute per system.
func QuickScale() ScaleOptions {
	o := DefaultScale()
	o.MemoryLimit = 256 << 20
	o.Before = 2 * time.Second
	o.MaxTime = 20 * time.Second
	o.Writers = 16
	o.MaxWrites = 1000000
	o.ListObjects = 10000
	o.Listers = 4
	o.ListRounds = 5
	o.StormClients = 200
	o.StormAfter = 3 * time.Second
	o.ChurnObjects = 3000
	o.ChurnTime = 15 * time.Second
	o.ChurnWindow = 5 * time.Second
	o.KeysCounts = []int{20000, 50000}
	o.KeysNamespace = 5000
	o.KeysGets = 2000
	o.KeysLists = 5
	return o
}

func (o *ScaleOptions) validate() error {
	for _, s := range o.Scenarios {
		if !slices.Contains(AllScales, s) {
			return fmt.Errorf("unknown scale scenario %q (want some of %v)", s, AllScales)
		}
	}
	if o.MemoryLimit < 0 || o.KeysMemoryLimit < 0 || o.Before < 0 || o.MaxTime <= 0 || o.Writers < 1 || o.MaxWrites < 1 {
		return fmt.Errorf("scale: memory limits and time before must not be negative; max time, writers and max writes must be positive")
	}
	if o.ListObjects < 1 || o.ListObjectSize < 1 || o.Listers < 1 || o.ListRounds < 1 || o.StormClients < 1 || o.StormObjects < 1 || o.StormAfter <= 0 ||
		o.ChurnObjects < 1 || o.ChurnWindow <= 0 || o.ChurnTime < o.ChurnWindow ||
		len(o.KeysCounts) == 0 || !slices.IsSorted(o.KeysCounts) || o.KeysCounts[0] < 1 || o.KeysNamespace < 1 || o.KeysGets < 1 || o.KeysLists < 1 {
		return fmt.Errorf("scale: list objects, object size, listers, rounds, storm clients, objects and time after, churn objects and window, keys counts (ascending), namespace, gets and lists must be positive; churn time at least a window")
	}
	if (o.MemoryLimit > 0 || o.KeysMemoryLimit > 0) && !cgroup.Available() {
		return fmt.Errorf("scale: a %d MiB limit needs a memory cgroup: %w (or give a limit of 0)", max(o.MemoryLimit, o.KeysMemoryLimit)>>20, cgroup.ErrUnavailable)
	}
	return nil
}

// ScaleReport is the outcome of the scale scenarios, per system.
type ScaleReport struct {
	RunInfo
	Systems []string     `json:"systems"`
	Fsync   FsyncLatency `json:"fsync"`

	Lists map[string]*ListsResult `json:"lists,omitempty"`
	Storm map[string]*StormResult `json:"storm,omitempty"`
	Churn map[string]*ChurnResult `json:"churn,omitempty"`
	Keys  map[string]*KeysResult  `json:"keys,omitempty"`
}

// RunScale runs o.Scale's scenarios on each system in turn, one system
// fully before the next. On error the report holds what was measured.
func RunScale(ctx context.Context, o Options) (*ScaleReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := o.Scale.validate(); err != nil {
		return nil, err
	}
	rep := &ScaleReport{Systems: o.Systems,
		Lists: map[string]*ListsResult{}, Storm: map[string]*StormResult{}, Churn: map[string]*ChurnResult{}, Keys: map[string]*KeysResult{}}
	log := rep.begin(o)
	done := func(err error) (*ScaleReport, error) {
		rep.end()
		return rep, err
	}
	work, cleanup, err := workDir(o, "axon-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if rep.Fsync, err = measureFsync(work, 200); err != nil {
		return nil, err
	}
	log.Info("bench scale", "work-dir", work, "systems", o.Systems, "scenarios", o.Scale.Scenarios, "memory-limit-mib", o.Scale.MemoryLimit>>20)
	for _, sc := range AllScales {
		if !slices.Contains(o.Scale.Scenarios, sc) {
			continue
		}
		for _, name := range o.Systems {
			r := &runner{o: o, sys: systems[name], log: log.With("system", name, "scenario", sc),
				dir: filepath.Join(work, name+"-"+sc), loaded: map[int]*server{}}
			var err error
			switch sc {
			case ScaleLists:
				rep.Lists[name], err = r.lists(ctx)
			case ScaleStorm:
				rep.Storm[name], err = r.storm(ctx)
			case ScaleChurn:
				rep.Churn[name], err = r.churn(ctx)
			case ScaleKeys:
				rep.Keys[name], err = r.keys(ctx)
			}
			if cerr := r.cleanup(); err == nil {
				err = cerr
			}
			if err != nil {
				return done(fmt.Errorf("%s, %s: %w", sc, name, err))
			}
		}
	}
	return done(nil)
}

// startInCgroup starts a server named name, set up by setup if not nil,
// in a memory cgroup of the configured limit if there is one, samples its
// memory and dials Conns clients to it; done closes them, stops the
// server and removes the group.
func (r *runner) startInCgroup(ctx context.Context, name string, setup func(*server)) (s *server, mem *memSampler, clis []*clientv3.Client, done func(), err error) {
	if s, err = r.newServer(name); err != nil {
		return nil, nil, nil, nil, err
	}
	if setup != nil {
		setup(s)
	}
	uncage, err := r.cage(s, r.o.Scale.MemoryLimit)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	done = func() {
		closeAll(clis)
		if err := s.stop(); err != nil {
			r.log.Warn("stop", "err", err)
		}
		uncage()
	}
	if err = r.startReady(ctx, s); err == nil {
		mem = sampleMemory(s.pid(), 100*time.Millisecond)
		clis, err = dialN(s, r.o.Conns)
	}
	if err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return s, mem, clis, done, nil
}

// cage makes s start in a memory cgroup of limit bytes (none if limit is
// 0); uncage removes the group once s has stopped.
func (r *runner) cage(s *server, limit int64) (uncage func(), err error) {
	if limit <= 0 {
		return func() {}, nil
	}
	cg, err := cgroup.New("axon-bench-"+r.sys.name, limit)
	if err != nil {
		return nil, err
	}
	s.cg = cg
	return func() {
		if err := cg.Remove(); err != nil {
			r.log.Warn("cgroup", "err", err)
		}
	}, nil
}

// fate is what became of a server in a memory cgroup: killed or not, and
// how much the group and the process held at most.
type fate struct {
	OOMKills        int    `json:"oom_kills"`
	Exited          string `json:"exited,omitempty"` // how the server ended, if it did before the scenario stopped it
	PeakRSSBytes    int64  `json:"peak_rss_bytes"`   // the process's VmHWM, sampled
	CgroupPeakBytes int64  `json:"cgroup_peak_bytes,omitempty"`
}

// readFate fills f once the scenario's load is over, before the server
// is stopped; m is the memory sampler of the server.
func (r *runner) readFate(s *server, m *memSampler) (fate, error) {
	f := fate{PeakRSSBytes: m.finish()}
	if !s.running() {
		f.Exited = fmt.Sprint(s.err)
	}
	if s.cg != nil {
		n, err := s.cg.OOMKills()
		if err != nil {
			return f, err
		}
		f.OOMKills, f.CgroupPeakBytes = n, s.cg.Peak()
	}
	return f, nil
}
