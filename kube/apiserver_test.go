package kube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kube-apiserver comes from the ./apiserver module. `make test-kube`
// builds it first and passes it in $KUBE_APISERVER; otherwise the suite
// runs the same `go build` into bin/, which Go skips when the binary there
// is up to date (it compares the build ID stamped in the binary).
const (
	apiserverEnv = "KUBE_APISERVER"
	apiserverPkg = "k8s.io/kubernetes/cmd/kube-apiserver"
)

func apiserverBinary() (string, error) {
	if p := os.Getenv(apiserverEnv); p != "" {
		return p, nil
	}
	out, err := filepath.Abs(filepath.Join("bin", "kube-apiserver"))
	if err != nil {
		return "", err
	}
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", out, apiserverPkg)
	cmd.Dir = "apiserver"
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "kube: go build %s into bin/ (about 15 minutes from a cold cache on 2 cores; set %s to use a built one)\n", apiserverPkg, apiserverEnv)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building kube-apiserver: %w", err)
	}
	fmt.Fprintf(os.Stderr, "kube: kube-apiserver built or up to date in %v\n", time.Since(start).Round(time.Second))
	return out, nil
}

// credentials are what every apiserver of a run is started with: a
// service-account signing key and a static token for an admin in
// system:masters.
type credentials struct {
	dir   string
	token string
}

func newCredentials(t *testing.T) credentials {
	t.Helper()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	c := credentials{dir: dir, token: hex.EncodeToString(tok)}
	line := c.token + `,kube-admin,kube-admin-uid,"system:masters"` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// apiServer is one kube-apiserver process at a time on a fixed port;
// restart runs a new process with the same flags, certificates and port.
type apiServer struct {
	bin   string
	args  []string
	url   string
	token string
	log   *apiLog

	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func newAPIServer(t *testing.T, bin string, cred credentials, etcdServers []string, log *apiLog) *apiServer {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	return &apiServer{
		bin: bin, token: cred.token, log: log,
		url: fmt.Sprintf("https://127.0.0.1:%d", port),
		args: []string{
			"--etcd-servers=" + strings.Join(etcdServers, ","),
			"--cert-dir=" + filepath.Join(dir, "certs"),
			fmt.Sprintf("--secure-port=%d", port),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--endpoint-reconciler-type=none",
			"--service-cluster-ip-range=10.0.0.0/24",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + filepath.Join(cred.dir, "sa.key"),
			"--service-account-signing-key-file=" + filepath.Join(cred.dir, "sa.key"),
			"--token-auth-file=" + filepath.Join(cred.dir, "tokens.csv"),
			"--authorization-mode=RBAC",
			// Compact every 10 s instead of 5 min, so that the store's
			// compaction (through kube-apiserver's compact_rev_key
			// protocol) happens within a setup's minute.
			"--etcd-compaction-interval=10s",
		},
	}
}

// start runs the apiserver and waits until /readyz answers ok.
func (a *apiServer) start(t *testing.T) {
	t.Helper()
	a.starts++
	a.log.mark(fmt.Sprintf("kube-apiserver start %d: %s %s", a.starts, a.bin, strings.Join(a.args, " ")))
	cmd := exec.Command(a.bin, a.args...)
	w := a.log.writer()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd, a.exited = cmd, make(chan struct{})
	go func() {
		err := cmd.Wait()
		a.log.mark(fmt.Sprintf("kube-apiserver exited: %v", err))
		close(a.exited)
	}()
	if err := a.awaitReady(3 * time.Minute); err != nil {
		a.log.dumpTail(t, 60)
		t.Fatal(err)
	}
}

// awaitReady polls /readyz.
func (a *apiServer) awaitReady(limit time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			return fmt.Errorf("kube-apiserver exited before it was ready (see its log above)")
		default:
		}
		req, _ := http.NewRequest("GET", a.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, failingChecks(body))
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %v: last /readyz: %s", limit, last)
}

// failingChecks picks the "[-]name failed" lines out of a /readyz body.
func failingChecks(body []byte) string {
	var out []string
	for l := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// stop sends SIGTERM and waits for the process, killing it after a
// minute.
func (a *apiServer) stop() {
	if a.cmd == nil {
		return
	}
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// kill ends the process with SIGKILL, as a crash or an OOM kill would:
// no graceful shutdown, nothing written on the way out.
func (a *apiServer) kill() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// metrics5xx returns apiserver_request_total's 5xx series (every
// client's, the apiserver's own loopback clients included) since this
// process started.
func (a *apiServer) metrics5xx(ctx context.Context) (map[string]float64, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parse5xx(resp.Body)
}

var series5xx = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)

func parse5xx(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := series5xx.FindStringSubmatch(sc.Text())
		// /readyz and friends answer 500 until the apiserver is ready.
		if m == nil || !strings.Contains(m[1], `code="5`) || strings.Contains(m[1], `subresource="/`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(m[2], &v); err != nil || v == 0 {
			continue
		}
		out[labels(m[1], "verb", "group", "resource", "subresource", "code")] += v
	}
	return out, sc.Err()
}

// labels renders the named labels of a Prometheus series, in order.
func labels(series string, names ...string) string {
	var out []string
	for _, n := range names {
		if _, rest, ok := strings.Cut(series, n+`="`); ok {
			v, _, _ := strings.Cut(rest, `"`)
			if v != "" {
				out = append(out, n+"="+v)
			}
		}
	}
	return strings.Join(out, " ")
}

// apiLog keeps every line the apiserver processes of one setup print,
// in a file (an artifact with `go test -artifacts`), with the suite's own
// marks in between, and remembers its klog error lines ("E1123 …") with
// the check that was running.
type apiLog struct {
	path string

	mu     sync.Mutex
	f      *os.File
	phase  string
	errors []logLine
}

type logLine struct {
	phase string
	text  string
}

func newAPILog(t *testing.T) *apiLog {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), "kube-apiserver.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	l := &apiLog{path: path, f: f, phase: "start"}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.f.Close()
	})
	return l
}

// setPhase names what runs now; later lines are attributed to it.
func (l *apiLog) setPhase(p string) {
	l.mark("phase " + p)
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

func (l *apiLog) mark(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, "===== %s %s\n", time.Now().Format("15:04:05.000"), s)
}

// klogError matches klog's header of an error line: E, month and day,
// time, thread, file:line].
var klogError = regexp.MustCompile(`^E\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ `)

func (l *apiLog) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.f, s)
	if klogError.MatchString(s) {
		l.errors = append(l.errors, logLine{phase: l.phase, text: s})
	}
}

func (l *apiLog) errorLines() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logLine(nil), l.errors...)
}

// writer returns a writer for one process's output that hands complete
// lines to l.
func (l *apiLog) writer() io.Writer { return &lineWriter{l: l} }

// dumpTail logs the last n lines of the file, for a failed start.
func (l *apiLog) dumpTail(t *testing.T, n int) {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last lines of %s:\n%s", l.path, strings.Join(lines, "\n"))
}

type lineWriter struct {
	l   *apiLog
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.l.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 {
		w.l.line(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}
