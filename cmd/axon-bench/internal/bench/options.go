package bench

import (
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Workload names, in the order they run.
const (
	Create  = "create"
	Update  = "update"
	Delete  = "delete"
	Get     = "get"
	List    = "list"
	Watch   = "watch"
	Hotkey  = "hotkey"
	Memory  = "memory"
	Restart = "restart"
)

// AllWorkloads lists every workload in run order.
var AllWorkloads = []string{Create, Update, Delete, Get, List, Watch, Hotkey, Memory, Restart}

// Options configures a run. Default and Quick return complete sets.
type Options struct {
	// Binary is the axon executable Axon runs from (`axon serve`).
	Binary string
	// EtcdBinary is the axon-bench executable etcd runs from
	// (`axon-bench etcd-reference`); only etcd's runs need it.
	EtcdBinary string
	// Systems to run, in order: "axon", "etcd".
	Systems []string
	// Workloads to run (names above); order does not matter.
	Workloads []string
	// Runs is how many times the systems run, alternating (axon, etcd,
	// axon, etcd, ...): a row's figures are the median run's and its
	// ratios the medians of the runs' ratios, with their spread.
	Runs int

	Clients   []int         // concurrent clients of create, update, delete, get
	Conns     int           // gRPC connections the clients share (at most one per client)
	Ops       int           // op bound per workload and client count
	MaxTime   time.Duration // time bound per workload and client count
	ValueSize int           // bytes per value of create, update, watch, memory, restart
	Keys      int           // preloaded keys that update and get pick from
	OpTimeout time.Duration // deadline of one request

	ListSizes      []int // objects per list workload
	ListObjectSize int
	ListPage       int // limit per page
	ListReps       int // full lists per size (also bounded by MaxTime)

	Watchers    []int // watcher counts
	WatchRate   int   // creates per second of the writer
	WatchEvents int   // creates per watcher count (also bounded by MaxTime)

	HotClients []int         // client counts of hotkey, a row each
	HotOps     int           // successful increments per hotkey row (upper bound)
	HotTime    time.Duration // time per hotkey row (upper bound)
	HotTimeout time.Duration // deadline of one Get or Txn of hotkey

	MemoryKeys  int   // keys loaded before reading peak RSS
	RestartKeys []int // keys stored before the restarts
	RestartReps int   // restarts per key count

	LoadClients int // concurrent clients of a preload
	LoadBatch   int // puts per preload txn

	// WorkDir holds data dirs and server logs; empty means a new temp dir,
	// removed at the end unless Keep.
	WorkDir string
	Keep    bool
	// CPUProfileDir, if set, receives a CPU profile of the Axon server per
	// write workload (the server must serve /debug/pprof).
	CPUProfileDir string
	// TLS serves both systems' clients over TLS (a self-signed certificate
	// made for the run) and has the clients dial them so.
	TLS bool

	// Scale configures the scale scenarios, which run instead
	// of the workloads when it names any.
	Scale ScaleOptions

	// AxonFlags are added to every `axon serve` the run starts.
	AxonFlags []string

	// Log receives progress lines; nil discards them.
	Log *slog.Logger `json:"-"`
}

// Default is the full configuration of axon-bench.
func Default() Options {
	return Options{
		Systems:        []string{"axon", "etcd"},
		Workloads:      []string{Create, Update, Delete, Get, List, Watch, Hotkey, Restart},
		Runs:           3,
		Clients:        []int{1, 64, 256},
		Conns:          8,
		Ops:            20000,
		MaxTime:        20 * time.Second,
		ValueSize:      512,
		Keys:           10000,
		OpTimeout:      10 * time.Second,
		ListSizes:      []int{10000, 100000},
		ListObjectSize: 1024,
		ListPage:       500,
		ListReps:       5,
		Watchers:       []int{10, 1000},
		WatchRate:      100,
		WatchEvents:    1000,
		HotClients:     []int{1, 8, 32, 256},
		HotOps:         10000,
		HotTime:        3 * time.Second,
		HotTimeout:     2 * time.Second,
		MemoryKeys:     1000000,
		RestartKeys:    []int{100000},
		RestartReps:    3,
		LoadClients:    64,
		LoadBatch:      100,
		Scale:          DefaultScale(),
	}
}

// Quick is a smoke configuration that runs every workload in seconds.
func Quick() Options {
	o := Default()
	o.Workloads = slices.Clone(AllWorkloads)
	o.Runs = 1
	o.Clients = []int{1, 8}
	o.Ops = 300
	o.MaxTime = 5 * time.Second
	o.Keys = 100
	o.ListSizes = []int{200}
	o.ListPage = 50 // several pages even at this size
	o.ListReps = 3
	o.Watchers = []int{10}
	o.WatchRate = 200
	o.WatchEvents = 100
	o.HotClients = []int{1, 8}
	o.HotOps = 500
	o.HotTime = time.Second
	o.MemoryKeys = 2000
	o.RestartKeys = []int{1000}
	o.RestartReps = 2
	o.LoadClients = 8
	o.Scale = QuickScale()
	return o
}

// Scale1M adds the one-million-key memory and restart runs.
func (o *Options) Scale1M() {
	o.MemoryKeys = 1000000
	if !slices.Contains(o.Workloads, Memory) {
		o.Workloads = append(o.Workloads, Memory)
	}
	if !slices.Contains(o.RestartKeys, 1000000) {
		o.RestartKeys = append(o.RestartKeys, 1000000)
	}
}

func (o *Options) validate() error {
	for _, s := range o.Systems {
		if _, ok := systems[s]; !ok {
			return fmt.Errorf("unknown system %q (want axon or etcd)", s)
		}
	}
	if len(o.Systems) == 0 {
		return fmt.Errorf("no systems selected")
	}
	for _, w := range o.Workloads {
		if !slices.Contains(AllWorkloads, w) {
			return fmt.Errorf("unknown workload %q (want some of %v)", w, AllWorkloads)
		}
	}
	if o.Binary == "" && slices.Contains(o.Systems, "axon") {
		return fmt.Errorf("no axon binary given")
	}
	if o.EtcdBinary == "" && slices.Contains(o.Systems, "etcd") {
		return fmt.Errorf("no axon-bench binary given for etcd-reference")
	}
	for _, n := range slices.Concat(o.Clients, o.HotClients) {
		if n < 1 {
			return fmt.Errorf("client count %d: want at least 1", n)
		}
	}
	if o.Ops < 1 || o.MaxTime <= 0 || o.ValueSize < 1 || o.Keys < 1 || o.OpTimeout <= 0 {
		return fmt.Errorf("ops, max time, value size, keys and op timeout must be positive")
	}
	if o.ListPage < 1 || o.ListReps < 1 || o.ListObjectSize < 1 {
		return fmt.Errorf("list page, reps and object size must be positive")
	}
	if o.WatchRate < 1 || o.WatchEvents < 1 {
		return fmt.Errorf("watch rate and events must be positive")
	}
	if o.HotOps < 1 || o.HotTime <= 0 || o.HotTimeout <= 0 {
		return fmt.Errorf("hot ops, hot time and hot timeout must be positive")
	}
	if o.RestartReps < 1 || o.LoadClients < 1 || o.LoadBatch < 1 || o.Conns < 1 {
		return fmt.Errorf("restart reps, load clients, load batch and conns must be positive")
	}
	return nil
}

func (o *Options) has(w string) bool { return slices.Contains(o.Workloads, w) }
