package main

import (
	"net/http"
	"net/http/pprof"
)

// withPprof adds net/http/pprof's handlers to mux when on (serve
// --enable-pprof), so that axon-bench --cpuprofile can profile the server.
func withPprof(mux *http.ServeMux, on bool) *http.ServeMux {
	if on {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
