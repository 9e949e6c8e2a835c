package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// runEtcdEnv makes this test binary run as etcd 3.7.3 itself (etcdmain:
// etcd's own flag parsing and start-up), so that a test can start both
// systems as processes with the same flags.
const runEtcdEnv = "AXON_TEST_RUN_ETCD"

func TestMain(m *testing.M) {
	if os.Getenv(runEtcdEnv) != "" {
		etcdmain.Main(append([]string{"etcd"}, os.Args[1:]...))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// process is a server under test: axon serve or etcd, started in its own
// working directory (unix sockets named without a path land there).
type process struct {
	name string
	cmd  *exec.Cmd
	dir  string
	out  *lockedBuffer
	done chan struct{} // closed once the process has exited
}

// startProcess starts name ("axon" with the binary bin, or "etcd") with
// args in a fresh working directory, stopped when the test ends.
func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	s := &process{name: name, dir: t.TempDir(), out: &lockedBuffer{}, done: make(chan struct{})}
	switch name {
	case "axon":
		s.cmd = exec.Command(bin, append([]string{"serve", "--data-dir", filepath.Join(s.dir, "data")}, args...)...)
	case "etcd":
		s.cmd = exec.Command(os.Args[0], append([]string{"--name", "default", "--data-dir", filepath.Join(s.dir, "data")}, args...)...)
		s.cmd.Env = append(os.Environ(), runEtcdEnv+"=1")
	default:
		t.Fatalf("unknown system %s", name)
	}
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, s.out.String())
		}
	})
	return s
}

// awaitHealthy waits until GET url answers 200, and reports false if the
// process exited first (it refused to start).
func (s *process) awaitHealthy(t *testing.T, url string) bool {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-s.done:
			return false
		case <-deadline:
			t.Fatalf("%s did not become healthy at %s\n%s", s.name, url, s.out.String())
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
	}
}
