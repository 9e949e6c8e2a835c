package embed

import (
	"net/http"
	"net/http/pprof"
)

// metricsMux serves /health, /livez, /readyz and /metrics, and cfg's
// MetricsHandlers. The health paths answer as etcd's do (health.go), and
// unhealthy while the instance does not serve (it starts or stops) and
// once the engine failed; /metrics serves the server's registry once it
// exists.
func (a *Axon) metricsMux(cfg *Config) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", a.serveHealth)
	a.handleChecks(mux, "/livez", livez)
	a.handleChecks(mux, "/readyz", readyz)
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
