package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestDebugFlags checks etcd's debugging flags on axon serve:
// --enable-pprof serves /debug/pprof on the client and the metrics URLs
// (and nothing without it), --metrics extensive adds the gRPC latency
// histogram that basic leaves out, /health counts its answers, and bad
// values of --metrics and --log-level are refused.
func TestDebugFlags(t *testing.T) {
	on, onMetrics := serveForAlerts(t, "--enable-pprof", "--metrics", "extensive")
	off, offMetrics := serveForAlerts(t)
	for _, base := range []string{"http://" + on, "http://" + onMetrics} {
		if code, body := get(t, base+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
			t.Errorf("%s/debug/pprof/ with --enable-pprof: %d %.80q", base, code, body)
		}
		if code, _ := get(t, base+"/debug/pprof/cmdline"); code != http.StatusOK {
			t.Errorf("%s/debug/pprof/cmdline with --enable-pprof: %d", base, code)
		}
	}
	for _, base := range []string{"http://" + off, "http://" + offMetrics} {
		if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusNotFound {
			t.Errorf("%s/debug/pprof/ without --enable-pprof: %d, want 404", base, code)
		}
	}

	for _, addr := range []string{on, off} {
		if _, err := newClient(t, addr).Put(t.Context(), "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	get(t, "http://"+on+"/health")
	_, extensive := get(t, "http://"+on+"/metrics")
	_, basic := get(t, "http://"+off+"/metrics")
	if !strings.Contains(extensive, `grpc_server_handling_seconds_count{grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1`) {
		t.Error("--metrics extensive: no latency histogram of the Put")
	}
	if strings.Contains(basic, "grpc_server_handling_seconds") {
		t.Error("--metrics basic serves the latency histogram, which etcd serves only with extensive")
	}
	if !strings.Contains(extensive, "etcd_server_health_success 1") {
		t.Error("a healthy /health answer is not counted in etcd_server_health_success")
	}

	for _, args := range [][]string{{"--metrics", "all"}, {"--log-level", "loud"}, {"--badger-compression", "lz4"}, {"--badger-value-threshold", "-1"}, {"--badger-value-threshold", "2097152"}} {
		cmd := serveCmd()
		cmd.SetArgs(append([]string{"--data-dir", t.TempDir(), "--listen-client-urls", "http://" + freeAddr(t),
			"--listen-metrics-urls", "http://" + freeAddr(t)}, args...))
		cmd.SetErr(io.Discard)
		cmd.SetOut(io.Discard)
		if err := cmd.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("serve %v: %v, want a refusal naming the flag", args, err)
		}
	}
}
