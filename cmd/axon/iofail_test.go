package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ioFailServer is `axon serve` on a data directory that the test breaks.
type ioFailServer struct {
	cmd     *exec.Cmd
	cli     *clientv3.Client
	metrics string // http://host:port of /health and /metrics
	stderr  *lockedBuffer
	exited  chan struct{}
	waitErr error
}

func startIOFail(t *testing.T, bin, data string, flags ...string) *ioFailServer {
	t.Helper()
	s := &ioFailServer{metrics: "http://" + freeAddr(t), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	flags = append([]string{"--listen-metrics-urls", s.metrics, "--disk-free-floor-bytes", "-1"}, flags...)
	s.cmd, s.cli = startServeWith(t, func(args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Stderr = io.MultiWriter(s.stderr, os.Stderr)
		return c
	}, data, flags...)
	go func() { s.waitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cli.Close()
	})
	return s
}

// get fetches a path of the metrics listener.
func (s *ioFailServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(s.metrics + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writer puts /w/<n> in a loop from one client, recording each put's
// start and outcome, until stop is called or a put fails with
// rpctypes.ErrStopped.
type writer struct {
	mu    sync.Mutex
	acked map[string]time.Time // key → when its put started
	last  error
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(cli *clientv3.Client) *writer {
	w := &writer{acked: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			key, began := fmt.Sprintf("/w/%06d", i), time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := cli.Put(ctx, key, "v")
			cancel()
			w.mu.Lock()
			if err == nil {
				w.acked[key] = began
			}
			w.last = err
			w.mu.Unlock()
			if errors.Is(err, rpctypes.ErrStopped) {
				return
			}
		}
	}()
	return w
}

func (w *writer) halt() map[string]time.Time {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// checkFailStop is what every kind of failed data directory must lead
// to, broken is when the failure was complete: writes fail with etcd's
// "server stopped" within a bounded time, no put that began after it was
// acknowledged, /health and /readyz report the failure while /metrics
// answers, and SIGTERM ends the process with a non-zero status within the
// shutdown timeout. It returns the puts acknowledged.
func checkFailStop(t *testing.T, s *ioFailServer, w *writer, broken time.Time) map[string]time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = s.cli.Put(ctx, "/after", "v")
		cancel()
		if errors.Is(err, rpctypes.ErrStopped) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, rpctypes.ErrStopped) {
		t.Fatalf("a put 10 s after the failure: %v, want %v", err, rpctypes.ErrStopped)
	}
	t.Logf("writes refused %v after the failure: %v", time.Since(broken).Round(time.Millisecond), err)
	acked := w.halt()
	for key, began := range acked {
		if began.After(broken) {
			t.Errorf("%s was acknowledged though its put began %v after the data directory failed", key, began.Sub(broken))
		}
	}
	if code, body := s.get(t, "/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"health":"false"`) {
		t.Errorf("/health: %d %s", code, body)
	} else {
		t.Logf("/health: %d %s", code, strings.TrimSpace(body))
	}
	if code, _ := s.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz: %d", code)
	}
	if code, body := s.get(t, "/metrics"); code != http.StatusOK || !strings.Contains(body, "grpc_server_handled_total") {
		t.Errorf("/metrics: %d (%d bytes)", code, len(body))
	}
	// Reads of what the engine holds go on.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	r, err := s.cli.Get(ctx, "/before")
	cancel()
	if err != nil || len(r.Kvs) != 1 {
		t.Errorf("a read after the failure: %v, %v", r, err)
	}
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("no exit %v after SIGTERM", shutdownTimeout+5*time.Second)
	}
	var ee *exec.ExitError
	if !errors.As(s.waitErr, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("exit after SIGTERM on a failed data directory: %v, want a non-zero status", s.waitErr)
	}
	t.Logf("exited %v after SIGTERM: %v; %d puts acknowledged before the failure", time.Since(start).Round(time.Millisecond), s.waitErr, len(acked))
	if !strings.Contains(s.stderr.String(), "the data directory failed") {
		t.Errorf("the log does not say the data directory failed")
	}
	return acked
}

// TestDataDirRemovedWhileServing removes the data directory under a
// serving instance with a writer running.
func TestDataDirRemovedWhileServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	data := filepath.Join(t.TempDir(), "data")
	s := startIOFail(t, buildAxon(t), data)
	if _, err := s.cli.Put(context.Background(), "/before", "v"); err != nil {
		t.Fatal(err)
	}
	w := startWriter(s.cli)
	waitAcked(t, w, 20)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	checkFailStop(t, s, w, time.Now())
}

// waitAcked waits until the writer has n puts acknowledged.
func waitAcked(t *testing.T, w *writer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		got, last := len(w.acked), w.last
		w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d puts acknowledged in 10 s, last: %v", got, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDataDirTurnsReadOnly serves from a small ext4 filesystem (a loop
// device) mounted errors=remount-ro and makes the kernel turn it
// read-only, as it does after an I/O error (ext4's trigger_fs_error).
// A plain `mount -o remount,ro` cannot do it: the kernel refuses it with
// EBUSY while Axon holds files open for writing, which the test checks
// too. Every put acknowledged before the failure is there after fsck and
// a restart. It needs root, loop devices and ext4, and skips without.
func TestDataDirTurnsReadOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a filesystem needs root")
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("truncate", "-s", "256M", img).CombinedOutput(); err != nil {
		t.Skipf("truncate: %v %s", err, out)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v %s", err, out)
	}
	mount := func() string {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "loop,errors=remount-ro", img, mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount an ext4 image: %v %s", err, out)
		}
		out, err := exec.Command("findmnt", "-n", "-o", "SOURCE", mnt).Output()
		if err != nil {
			t.Fatalf("findmnt: %v", err)
		}
		return filepath.Base(strings.TrimSpace(string(out)))
	}
	umount := func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	}
	dev := mount()
	mounted := true
	t.Cleanup(func() {
		if mounted {
			umount()
		}
	})
	trigger := filepath.Join("/sys/fs/ext4", dev, "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		t.Skipf("no ext4 error trigger: %v", err)
	}
	bin := buildAxon(t)
	data := filepath.Join(mnt, "data")
	s := startIOFail(t, bin, data)
	if _, err := s.cli.Put(context.Background(), "/before", "v"); err != nil {
		t.Fatal(err)
	}
	w := startWriter(s.cli)
	waitAcked(t, w, 20)
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err == nil {
		t.Fatalf("mount -o remount,ro succeeded while serving: the test expects the kernel to refuse it")
	} else {
		t.Logf("mount -o remount,ro while serving: %v %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.WriteFile(trigger, []byte("axon test: read-only"), 0); err != nil {
		t.Fatalf("trigger an ext4 error: %v", err)
	}
	broken := time.Now()
	acked := checkFailStop(t, s, w, broken)

	// Nothing acknowledged was lost: fsck, mount again and look.
	umount()
	mounted = false
	if out, err := exec.Command("e2fsck", "-f", "-y", img).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 1 { // 1: errors corrected
			t.Fatalf("e2fsck: %v %s", err, out)
		}
	}
	mount()
	mounted = true
	s = startIOFail(t, bin, data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.cli.Get(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, kv := range r.Kvs {
		found[string(kv.Key)] = true
	}
	there := 0
	for key := range acked {
		if found[key] {
			there++
		} else {
			t.Errorf("%s was acknowledged before the failure and is gone after a restart", key)
		}
	}
	t.Logf("after fsck and a restart: %d of %d acknowledged puts there (%d keys)", there, len(acked), len(r.Kvs))
	if _, err := s.cli.Put(ctx, "/again", "v"); err != nil {
		t.Fatalf("a put after the restart: %v", err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	if s.waitErr != nil {
		t.Errorf("exit after SIGTERM on a sound data directory: %v", s.waitErr)
	}
}
