package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestRunCluster runs what `make run-cluster` runs (scripts/run-cluster.sh)
// on free ports: three instances answer through clientv3, the leader's
// process killed as the README says, writes go on through the others, and
// Ctrl-C (SIGINT) stops every process the script started.
func TestRunCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four processes")
	}
	bin := t.TempDir()
	for _, b := range []string{"axon", "axon-bench"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b), "../"+b).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	dir := t.TempDir()
	var ports []string
	var eps []string
	for range 3 {
		addr := freeAddr(t)
		_, port, _ := strings.Cut(addr, ":")
		ports = append(ports, port)
		eps = append(eps, addr)
	}
	script := exec.Command("../../scripts/run-cluster.sh")
	script.Env = append(os.Environ(), "AXON_CLUSTER_BIN="+bin, "AXON_CLUSTER_DIR="+dir,
		"AXON_CLUSTER_PD="+freeAddr(t), "AXON_CLUSTER_PORTS="+strings.Join(ports, " "))
	out := &lockedBuffer{}
	script.Stdout, script.Stderr = out, out
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { script.Wait(); close(done) }()
	t.Cleanup(func() {
		script.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("script output:\n%s", out.String())
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(key string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			_, err := cli.Put(ctx, key, "v")
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("put %s: %v\n%s", key, err, out.String())
			}
		}
	}
	put("/before")
	if !strings.Contains(out.String(), strings.Join(eps, ",")) {
		t.Errorf("the script does not print the endpoints:\n%s", out.String())
	}
	leader := -1
	for i, ep := range eps {
		if leads(ep) {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no instance leads")
	}
	pid := readPid(t, filepath.Join(dir, "axon-"+strconv.Itoa(leader)+".pid"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	put("/after-the-kill")
	var all []int
	for _, name := range []string{"tikv-server", "axon-0", "axon-1", "axon-2"} {
		all = append(all, readPid(t, filepath.Join(dir, name+".pid")))
	}
	if err := script.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the script did not stop on SIGINT")
	}
	for _, p := range all {
		if syscall.Kill(p, 0) == nil {
			t.Errorf("process %d still runs after SIGINT", p)
		}
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
