package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/server"
)

// health is etcd's /health answer.
type health struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// healthTimeout is etcd's request timeout (5 s plus two election
// timeouts), which bounds its health reads: a stuck engine answers
// unhealthy once it passes.
const healthTimeout = 7 * time.Second

// errNotServing: the instance is starting (the engine opens, the node
// recovers) or stopping.
var errNotServing = errors.New("not serving")

// serving returns the server to check, or why there is none to: the
// engine failed, or the instance does not serve.
func (a *Axon) serving() (*server.Server, error) {
	if f := a.failed.Load(); f != nil {
		if err := (*f)(); err != nil {
			return nil, fmt.Errorf("STORAGE ERROR:%w", err)
		}
	}
	s := a.srv.Load()
	if s == nil || !a.ready.Load() {
		return nil, errNotServing
	}
	return s, nil
}

// serveHealth answers /health as etcd does: false with the first active
// alarm not named by ?exclude=, with no leader (unless
// ?serializable=true), or when a one-key read fails. The checks are the
// instance's own, run as no user, so auth does not fail them (etcd runs
// them as root). Each answer is counted (etcd's health_success and
// health_failures).
func (a *Axon) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	var h health
	s, err := a.serving()
	if err != nil {
		h = health{Health: "false", Reason: err.Error()}
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		hc := make(chan health, 1)
		go func() { hc <- checkHealth(ctx, s, r) }()
		select {
		case h = <-hc:
		case <-ctx.Done():
			// A stuck engine need not heed ctx; the probe is answered.
			h = health{"false", fmt.Sprintf("RANGE ERROR:%s", ctx.Err())}
		}
		cancel()
	}
	if s := a.srv.Load(); s != nil {
		s.ObserveHealth(h.Health == "true")
	}
	b, _ := json.Marshal(h)
	if h.Health != "true" {
		w.Header().Set("Content-Type", "application/json")
		http.Error(w, string(b), http.StatusServiceUnavailable)
		return
	}
	w.Write(b)
}

func checkHealth(ctx context.Context, s *server.Server, r *http.Request) health {
	serializable := r.URL.Query().Get("serializable") == "true"
	alarms, err := s.Alarms(ctx)
	if err != nil {
		return health{"false", fmt.Sprintf("ALARM ERROR:%s", err)}
	}
	for _, a := range alarms {
		if excluded(r, a.Alarm.String()) {
			continue
		}
		switch a.Alarm {
		case pb.AlarmType_NOSPACE:
			return health{"false", "ALARM NOSPACE"}
		case pb.AlarmType_CORRUPT:
			return health{"false", "ALARM CORRUPT"}
		default:
			return health{"false", "ALARM UNKNOWN"}
		}
	}
	if !serializable && !s.HasLeader(ctx) {
		return health{"false", "RAFT NO LEADER"}
	}
	if err := s.HealthRead(ctx, serializable); err != nil {
		return health{"false", fmt.Sprintf("RANGE ERROR:%s", err)}
	}
	return health{"true", ""}
}

func excluded(r *http.Request, name string) bool {
	for _, q := range r.URL.Query()["exclude"] {
		if q == name {
			return true
		}
	}
	return false
}

// check is one of etcd's named checks of /livez and /readyz.
type check struct {
	name string
	run  func(ctx context.Context, s *server.Server) error
}

// livez and readyz are etcd's checks of /livez and /readyz, in the order
// they are reported.
var (
	livez  = []check{{"serializable_read", readCheck(true)}}
	readyz = []check{
		{"data_corruption", func(ctx context.Context, s *server.Server) error {
			alarms, err := s.Alarms(ctx)
			if err != nil {
				return err
			}
			for _, a := range alarms {
				if a.Alarm == pb.AlarmType_CORRUPT {
					return fmt.Errorf("alarm activated: %s", a.Alarm)
				}
			}
			return nil
		}},
		{"serializable_read", readCheck(true)},
		{"linearizable_read", readCheck(false)},
		// Axon has no learners: every instance serves reads and writes.
		{"non_learner", func(context.Context, *server.Server) error { return nil }},
	}
)

func readCheck(serializable bool) func(ctx context.Context, s *server.Server) error {
	return func(ctx context.Context, s *server.Server) error { return s.HealthRead(ctx, serializable) }
}

// handleChecks serves checks at root (all of them less those named by
// ?exclude=) and each alone at root/NAME, as etcd does.
func (a *Axon) handleChecks(mux *http.ServeMux, root string, checks []check) {
	kind := strings.TrimPrefix(root, "/")
	mux.HandleFunc(root, func(w http.ResponseWriter, r *http.Request) {
		var run []check
		for _, c := range checks {
			if !excluded(r, c.name) {
				run = append(run, c)
			}
		}
		a.runChecks(w, r, kind, run)
	})
	for _, c := range checks {
		mux.HandleFunc(root+"/"+c.name, func(w http.ResponseWriter, r *http.Request) {
			a.runChecks(w, r, kind, []check{c})
		})
	}
}

// runChecks answers as etcd's /livez and /readyz (kind): 200 "ok" when
// every check passes (each listed first with ?verbose), else 503 with each
// check's result, and counts each check as etcd does. A failed engine or
// an instance that does not serve fails every check.
func (a *Axon) runChecks(w http.ResponseWriter, r *http.Request, kind string, checks []check) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	s, notServing := a.serving()
	// The checks run at once, so that a stuck one leaves the others
	// their answers and the whole its one timeout.
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		if errs[i] = notServing; notServing == nil {
			wg.Go(func() { errs[i] = within(ctx, func() error { return c.run(ctx, s) }) })
		}
	}
	wg.Wait()
	var out bytes.Buffer
	failed := false
	for i, c := range checks {
		if s := a.srv.Load(); s != nil {
			s.ObserveCheck(kind, c.name, errs[i] == nil)
		}
		if err := errs[i]; err != nil {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&out, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		http.Error(w, out.String(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, ok := r.URL.Query()["verbose"]; ok {
		w.Write(out.Bytes())
	}
	fmt.Fprint(w, "ok\n")
}

// within returns f's error, or ctx's if ctx ends first: a stuck engine
// need not heed ctx, and a probe must be answered. f runs on until the
// engine returns.
func within(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
