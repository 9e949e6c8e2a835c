package kube

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// clients are the suite's client-go clients of one apiserver, all going
// through one recorder of the 5xx answers they get.
type clients struct {
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

func newClients(t *testing.T, a *apiServer, rec *recorder) clients {
	t.Helper()
	cfg := &rest.Config{
		Host:            a.url,
		BearerToken:     a.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
		WarningHandler:  rest.NoWarnings{},
		UserAgent:       "axon-kube-suite",
		WrapTransport:   rec.wrap,
	}
	// Built-in types go as protobuf, as controllers send them.
	typed := rest.CopyConfig(cfg)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(typed)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return clients{cs: cs, dyn: dyn}
}

// recorder keeps every 5xx answer the suite's clients get, with the check
// that was running.
type recorder struct {
	mu    sync.Mutex
	phase string
	bad   []httpResult
	total int
}

type httpResult struct {
	phase  string
	method string
	path   string
	code   int
	reason string
	msg    string
}

func (r httpResult) String() string {
	return fmt.Sprintf("%s %s: %d %s: %s", r.method, r.path, r.code, r.reason, r.msg)
}

func (r *recorder) setPhase(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = p
}

func (r *recorder) results() []httpResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]httpResult(nil), r.bad...)
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		r.total++
		phase := r.phase
		r.mu.Unlock()
		if err != nil || resp.StatusCode < 500 {
			return resp, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		res := httpResult{phase: phase, method: req.Method, path: req.URL.Path, code: resp.StatusCode}
		if req.URL.Query().Get("watch") == "true" {
			res.path += "?watch"
		}
		if obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil); err == nil {
			if st, ok := obj.(*metav1.Status); ok {
				res.reason, res.msg = string(st.Reason), st.Message
			}
		}
		if res.msg == "" {
			res.msg = strings.ToValidUTF8(string(body), "?")
		}
		r.mu.Lock()
		r.bad = append(r.bad, res)
		r.mu.Unlock()
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
