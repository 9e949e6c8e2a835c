package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// readyTimeout bounds a server's start, recovery included.
const readyTimeout = 5 * time.Minute

// Run runs the selected workloads on each selected system in turn. On
// error the report holds the rows measured so far.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Systems: o.Systems}
	log := rep.begin(o)
	done := func(err error) (*Report, error) {
		rep.end()
		rep.finish()
		return rep, err
	}
	work, cleanup, err := workDir(o, "axon-bench-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if o.CPUProfileDir != "" {
		if err := os.MkdirAll(o.CPUProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("make profile dir: %w", err)
		}
	}
	var tf *tlsFiles
	if o.TLS {
		var err error
		if tf, err = newTLSFiles(filepath.Join(work, "tls")); err != nil {
			return nil, err
		}
	}
	fs, err := measureFsync(work, 200)
	if err != nil {
		return nil, err
	}
	rep.Fsync = fs
	log.Info("bench", "work-dir", work, "fsync-p50", fmtMs(fs.P50Ms), "fsync-p99", fmtMs(fs.P99Ms), "tls", o.TLS, "systems", o.Systems, "runs", o.Runs,
		"workloads", o.Workloads, "clients", o.Clients, "ops", o.Ops, "max-time", o.MaxTime)
	for run := range max(o.Runs, 1) {
		for _, name := range o.Systems {
			r := &runner{o: o, sys: systems[name], log: log.With("system", name, "run", run+1), rep: rep,
				dir: filepath.Join(work, fmt.Sprintf("%s-%d", name, run+1)), loaded: map[int]*server{}, tls: tf}
			err := r.run(ctx)
			if cerr := r.cleanup(); err == nil {
				err = cerr
			}
			if err != nil {
				return done(fmt.Errorf("%s, run %d: %w", name, run+1, err))
			}
		}
	}
	return done(nil)
}

// runner runs the workloads of one system.
type runner struct {
	o       Options
	sys     system
	log     *slog.Logger
	rep     *Report
	dir     string
	servers []*server
	// loaded holds stopped servers with that many keys, for restart.
	loaded map[int]*server
	tls    *tlsFiles
}

func (r *runner) run(ctx context.Context) error {
	for _, w := range []string{Create, Update, Delete, Get, List, Watch, Hotkey} {
		if r.o.has(w) {
			if err := r.mainWorkloads(ctx); err != nil {
				return err
			}
			break
		}
	}
	if r.o.has(Memory) {
		if err := r.memory(ctx); err != nil {
			return err
		}
	}
	if r.o.has(Restart) {
		for _, n := range r.o.RestartKeys {
			if err := r.restart(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) newServer(name string) (*server, error) {
	s, err := newServer(r.sys.binary(&r.o), r.sys, filepath.Join(r.dir, name), r.sys.name == "axon" && r.o.CPUProfileDir != "", r.tls)
	if err == nil && r.sys.name == "axon" {
		s.extra = r.o.AxonFlags
	}
	if err != nil {
		return nil, err
	}
	r.servers = append(r.servers, s)
	return s, nil
}

func (r *runner) startReady(ctx context.Context, s *server) error {
	t0 := time.Now()
	if err := s.start(); err != nil {
		return err
	}
	if err := s.waitReady(ctx, readyTimeout); err != nil {
		return err
	}
	r.log.Info("server ready", "pid", s.pid(), "client", s.client, "data-dir", s.dir, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// drop stops s and removes its data unless Keep.
func (r *runner) drop(s *server) error {
	err := s.stop()
	if !r.o.Keep {
		if rerr := os.RemoveAll(s.dir); err == nil && rerr != nil {
			err = fmt.Errorf("remove data dir: %w", rerr)
		}
	}
	return err
}

func (r *runner) cleanup() error {
	var errs []error
	for _, s := range r.servers {
		errs = append(errs, r.drop(s))
	}
	return errors.Join(errs...)
}

// alive reports a server that died under load.
func (r *runner) alive(s *server) error {
	if s.running() {
		return nil
	}
	return fmt.Errorf("%s exited (%v); log %s:\n%s", r.sys.name, s.err, s.logPath, s.logTail())
}

func dialN(s *server, n int) ([]*clientv3.Client, error) {
	var clis []*clientv3.Client
	for range n {
		c, err := s.dial()
		if err != nil {
			closeAll(clis)
			return nil, err
		}
		clis = append(clis, c)
	}
	return clis, nil
}

func closeAll(clis []*clientv3.Client) {
	for _, c := range clis {
		c.Close()
	}
}

// launch starts a fresh server named name, waits until it serves and
// dials Conns clients to it.
func (r *runner) launch(ctx context.Context, name string) (*server, []*clientv3.Client, error) {
	s, err := r.newServer(name)
	if err != nil {
		return nil, nil, err
	}
	if err := r.startReady(ctx, s); err != nil {
		return nil, nil, err
	}
	clis, err := dialN(s, r.o.Conns)
	if err != nil {
		return nil, nil, err
	}
	return s, clis, nil
}

func (r *runner) mainWorkloads(ctx context.Context) error {
	s, clis, err := r.launch(ctx, "main")
	if err != nil {
		return err
	}
	err = r.onMain(ctx, s, clis)
	closeAll(clis)
	if err != nil {
		return err
	}
	return r.drop(s)
}

func (r *runner) onMain(ctx context.Context, s *server, clis []*clientv3.Client) error {
	for _, w := range []string{Create, Update, Delete, Get} {
		if !r.o.has(w) {
			continue
		}
		for _, c := range r.o.Clients {
			if err := r.ops(ctx, s, clis[:min(len(clis), c)], w, c); err != nil {
				return err
			}
		}
	}
	if r.o.has(List) {
		for _, n := range r.o.ListSizes {
			if err := r.list(ctx, s, clis, n); err != nil {
				return err
			}
		}
	}
	if r.o.has(Watch) {
		for _, n := range r.o.Watchers {
			if err := r.watch(ctx, s, clis[0], n); err != nil {
				return err
			}
		}
	}
	if r.o.has(Hotkey) {
		for _, c := range r.o.HotClients {
			if err := r.hotkey(ctx, s, clis[:min(len(clis), c)], c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) record(row *Row, res *Result) {
	row.Runs[r.sys.name] = append(row.Runs[r.sys.name], res)
	args := []any{"ops", res.Ops, "ops/s", round(res.OpsPerSec), "p50", fmtMs(res.P50Ms), "p99", fmtMs(res.P99Ms),
		"server-cpu-s", round(res.ServerCPUSec), "client-cpu-s", round(res.ClientCPUSec)}
	if res.AttemptsPerOp > 0 {
		args = append(args, "tries/op", round(res.AttemptsPerOp))
	}
	if res.Conflicts > 0 {
		args = append(args, "conflicts", res.Conflicts)
	}
	if res.CutShort > 0 {
		args = append(args, "cut-short", res.CutShort)
	}
	if res.Errors > 0 {
		args = append(args, "errors", res.Errors, "first-error", res.FirstError)
	}
	r.log.Info(row.Name, args...)
}

func round(f float64) float64 {
	if f == 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(f))))
	return math.Round(f*p) / p
}

// count names a count the short way: 10000 is 10k, 1000000 is 1m.
func count(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// profile fetches a CPU profile of s covering the next d (pprof has no
// way to stop early); the returned func waits for it.
func (r *runner) profile(s *server, name string, d time.Duration) func() {
	if !s.pprof {
		return func() {}
	}
	secs := int(math.Ceil(d.Seconds()))
	path := filepath.Join(r.o.CPUProfileDir, fmt.Sprintf("%s-%s.pprof", r.sys.name, strings.NewReplacer(" ", "-", "=", "").Replace(name)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		hc := &http.Client{Timeout: time.Duration(secs)*time.Second + time.Minute}
		resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.metrics, secs))
		if err != nil {
			r.log.Warn("cpu profile", "err", err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			r.log.Warn("cpu profile", "status", resp.Status, "hint", "serve needs --enable-pprof")
			return
		}
		f, err := os.Create(path)
		if err != nil {
			r.log.Warn("cpu profile", "err", err)
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			r.log.Warn("cpu profile", "err", err)
			return
		}
		r.log.Info("cpu profile written", "path", path)
	}()
	return func() { <-done }
}

// workDir is o.WorkDir, or a new temporary directory (prefix) that
// cleanup removes unless o.Keep.
func workDir(o Options, prefix string) (dir string, cleanup func(), err error) {
	if o.WorkDir != "" {
		return o.WorkDir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, fmt.Errorf("make work dir: %w", err)
	}
	if o.Keep {
		return d, func() {}, nil
	}
	return d, func() { os.RemoveAll(d) }, nil
}
