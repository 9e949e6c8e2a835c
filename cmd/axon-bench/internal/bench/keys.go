package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// KeysStep is one system at one key count of the many-keys scenario.
type KeysStep struct {
	Keys   int `json:"keys"`   // wanted
	Stored int `json:"stored"` // there: fewer if the quota stopped the load
	// Full is the error that stopped the load (etcd's NOSPACE), if one did.
	Full        string  `json:"full,omitempty"`
	LoadSeconds float64 `json:"load_seconds"`
	LoadRate    float64 `json:"load_keys_per_sec"` // of this step's keys
	GetP50Ms    float64 `json:"get_p50_ms"`
	GetP99Ms    float64 `json:"get_p99_ms"`
	ListP50Ms   float64 `json:"list_p50_ms"` // one namespace, paginated
	ListP99Ms   float64 `json:"list_p99_ms"`
	// SettleSeconds is how long the server took, after the load, to go
	// idle (its background work, Badger's level compactions, done) before
	// the reads were timed; at most settleMax.
	SettleSeconds float64 `json:"settle_seconds"`
	CompactMs     float64 `json:"compact_ms"` // physical: the sweep included
	RestartMs     float64 `json:"restart_ms"`
	// PeakRSSBytes is VmHWM from the step's start (the last restart) to
	// its restart; RSSAfterRestartBytes the resident set once serving.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// PeakAnonBytes is the highest RssAnon sampled over the same time: the
	// server's own memory, without the pages of the files it maps.
	PeakAnonBytes        int64   `json:"peak_anon_bytes"`
	RSSAfterRestartBytes int64   `json:"rss_after_restart_bytes"`
	DiskBytes            int64   `json:"disk_bytes"`
	DiskBytesPerKey      float64 `json:"disk_bytes_per_key"`
	// ReadBytesPerGet is what the server fetched from the disk (its
	// read_bytes, page faults on mapped files included) over the point
	// gets, per get: 4096 a get is one page read from the disk per get.
	ReadBytesPerGet float64 `json:"read_bytes_per_get"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
}

// KeysResult is one system's many-keys outcome, a step per key count.
type KeysResult struct {
	EtcdQuotaBytes int64      `json:"etcd_quota_bytes,omitempty"`
	Steps          []KeysStep `json:"steps"`
}

// keys loads one server to each of KeysCounts in turn (objects of
// ListObjectSize in namespaces of KeysNamespace) and at each measures the
// load, point gets, a namespace's list, a physical compaction, disk per
// key and a restart. etcd runs with Quota; once it refuses for
// want of space the larger counts are skipped; Axon runs without a quota.
// The server runs in a memory cgroup of KeysMemoryLimit if there is one,
// else outside any: then the point is what the key count does to memory.
func (r *runner) keys(ctx context.Context) (*KeysResult, error) {
	o := r.o.Scale
	res := &KeysResult{}
	s, err := r.newServer("keys")
	if err != nil {
		return nil, err
	}
	uncage, err := r.cage(s, o.KeysMemoryLimit)
	if err != nil {
		return nil, err
	}
	defer uncage()
	switch r.sys.name {
	case "etcd":
		s.quota, res.EtcdQuotaBytes = o.Quota, o.Quota
	case "axon":
		// Axon's default quota is etcd's 2 GiB; the point is to go past it.
		s.quota = -1
	}
	if err := r.startReady(ctx, s); err != nil {
		return nil, err
	}
	key := func(i int) string { return fmt.Sprintf("%so%06d", keysNamespace(i/o.KeysNamespace), i%o.KeysNamespace) }
	stored := 0
	for _, n := range o.KeysCounts {
		if n <= stored {
			continue
		}
		st, err := r.keysStep(ctx, s, key, stored, n)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, *st)
		stored = st.Stored
		if st.Full != "" {
			r.log.Info("full: larger counts skipped", "stored", stored, "err", st.Full)
			break
		}
	}
	return res, r.drop(s)
}

func keysNamespace(j int) string { return fmt.Sprintf("/bench/keys/ns%04d/", j) }

func (r *runner) keysStep(ctx context.Context, s *server, key func(int) string, from, n int) (*KeysStep, error) {
	o := r.o.Scale
	st := &KeysStep{Keys: n}
	clis, err := dialN(s, r.o.Conns)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(clis) }()
	mem := sampleMemory(s.pid(), 100*time.Millisecond)
	defer mem.finish()
	r.log.Info("loading", "from", from, "to", n)
	t0 := time.Now()
	_, lerr := r.load(ctx, clis, n-from, o.ListObjectSize, func(i int) string { return key(from + i) })
	st.LoadSeconds = time.Since(t0).Seconds()
	if lerr != nil && grpcCode(lerr) != codes.ResourceExhausted {
		return nil, lerr
	}
	if lerr != nil {
		st.Full = lerr.Error()
		// A NOSPACE alarm refuses puts, not reads: count what is there.
		cnt, err := clis[0].Get(ctx, "/bench/keys/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		st.Stored = int(cnt.Count)
	} else {
		st.Stored = n
	}
	st.LoadRate = div(float64(st.Stored-from), st.LoadSeconds)
	settled, err := settle(ctx, s.pid())
	if err != nil {
		return nil, err
	}
	st.SettleSeconds = settled.Seconds()
	read0, err := procReadBytes(s.pid())
	if err != nil {
		return nil, err
	}
	gets, err := r.timed(ctx, s, clis, len(clis), o.KeysGets, r.o.MaxTime, r.o.OpTimeout, func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
		g, err := cli.Get(ctx, key(wk.rng.IntN(st.Stored)))
		if err == nil && len(g.Kvs) != 1 {
			err = fmt.Errorf("get: %d keys, want 1", len(g.Kvs))
		}
		return false, err
	})
	if err != nil {
		return nil, err
	}
	st.GetP50Ms, st.GetP99Ms = gets.P50Ms, gets.P99Ms
	read1, err := procReadBytes(s.pid())
	if err != nil {
		return nil, err
	}
	st.ReadBytesPerGet = div(float64(read1-read0), float64(gets.Ops))
	full := max(st.Stored/o.KeysNamespace, 1) // namespaces there whole (or the one)
	pages := time.Duration(o.KeysNamespace/r.o.ListPage + 1)
	lists, err := r.timed(ctx, s, clis[:1], 1, o.KeysLists, r.o.MaxTime, pages*r.o.OpTimeout, func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
		n, err := listAll(ctx, cli, keysNamespace(wk.rng.IntN(full)), r.o.ListPage)
		if err == nil && n != min(o.KeysNamespace, st.Stored) {
			err = fmt.Errorf("listed %d objects, want %d", n, min(o.KeysNamespace, st.Stored))
		}
		return false, err
	})
	if err != nil {
		return nil, err
	}
	st.ListP50Ms, st.ListP99Ms = lists.P50Ms, lists.P99Ms
	st.Errors, st.FirstError = gets.Errors+lists.Errors, gets.FirstError+lists.FirstError
	rev, err := currentRev(ctx, clis[0])
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if _, err := clis[0].Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	st.CompactMs = ms(time.Since(t1))
	st.DiskBytes = dirBytes(s.dir)
	st.DiskBytesPerKey = div(float64(st.DiskBytes), float64(st.Stored))
	if st.PeakRSSBytes, err = procPeakRSS(s.pid()); err != nil {
		return nil, err
	}
	mem.finish()
	st.PeakAnonBytes = mem.anonPeak()
	closeAll(clis)
	clis = nil
	if err := s.stop(); err != nil {
		return nil, err
	}
	t2 := time.Now()
	if err := r.startReady(ctx, s); err != nil {
		return nil, err
	}
	st.RestartMs = ms(time.Since(t2))
	if st.RSSAfterRestartBytes, err = procRSS(s.pid()); err != nil {
		return nil, err
	}
	r.log.Info("keys step", "keys", st.Stored, "load-rate", round(st.LoadRate), "get-p99", fmtMs(st.GetP99Ms), "list-p99", fmtMs(st.ListP99Ms),
		"read/get", round(st.ReadBytesPerGet), "compact", fmtMs(st.CompactMs), "restart", fmtMs(st.RestartMs), "settle", fmtMs(st.SettleSeconds*1000), "peak-rss", fmtBytes(st.PeakRSSBytes), "peak-anon", fmtBytes(st.PeakAnonBytes), "disk/key", round(st.DiskBytesPerKey))
	return st, nil
}

// Settling: the server counts as idle once it used under settleIdle of a
// core over settleWindow; settle gives up after settleMax.
const (
	settleWindow = 2 * time.Second
	settleIdle   = 0.1
	settleMax    = 3 * time.Minute
)

// settle waits until process pid goes idle, so that reads are timed
// without the background work a load leaves (Badger compacts the levels
// it filled for minutes after it); it returns how long that took.
func settle(ctx context.Context, pid int) (time.Duration, error) {
	t0 := time.Now()
	last, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	t := time.NewTicker(settleWindow)
	defer t.Stop()
	for time.Since(t0) < settleMax {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
		cpu, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		if cpu-last < settleIdle*settleWindow.Seconds() {
			break
		}
		last = cpu
	}
	return time.Since(t0), nil
}
