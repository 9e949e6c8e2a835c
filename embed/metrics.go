package embed

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
)

// metricsMux serves /health, /readyz and /metrics, and cfg's
// MetricsHandlers. /readyz is 200 once ready is set (the node has
// recovered and the client listeners serve) and 503 before that, once
// shutdown begins and once the engine failed; /health is etcd's check
// once ready, and false once the engine failed; /metrics serves the
// server's registry once it exists.
func (a *Axon) metricsMux(cfg *Config) *http.ServeMux {
	mux := http.NewServeMux()
	failure := func() error {
		if f := a.failed.Load(); f != nil {
			return (*f)()
		}
		return nil
	}
	unhealthy := func() {
		if s := a.srv.Load(); s != nil {
			s.ObserveHealth(false)
		}
	}
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if err := failure(); err != nil {
			unhealthy()
			// etcd's health answers false with a reason when the member
			// cannot serve; etcd itself would have exited.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ := json.Marshal(health{Health: "false", Reason: "STORAGE ERROR:" + err.Error()})
			fmt.Fprintln(w, string(b))
			return
		}
		if h := a.health.Load(); h != nil && a.ready.Load() {
			(*h)(w, r)
			return
		}
		unhealthy()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"health":"false","reason":"not serving"}`)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := failure(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !a.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		s := a.srv.Load()
		if s == nil {
			http.Error(w, "recovering", http.StatusServiceUnavailable)
			return
		}
		s.Metrics().ServeHTTP(w, r)
	})
	for path, h := range cfg.MetricsHandlers {
		mux.Handle(path, h)
	}
	if cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
