package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/internal/cgrouptest"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/internal/proctest"
)

// TestServeFitsItsCgroup runs `axon serve` in a memory cgroup of 384 MiB,
// as in a pod with that limit and no flag, and writes 100,000 creates of
// 512 B from 64 clients. The server must size itself from the limit and
// live through them: with Badger's defaults (--memory-budget-bytes=-1) the
// same load peaks near 600 MiB and the kernel kills the server.
func TestServeFitsItsCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const limit = 384 << 20
	g := cgrouptest.New(t, limit)
	bin := buildAxon(t)
	var logs lockedBuffer
	cmd, cli := startServeWith(t, func(args ...string) *exec.Cmd {
		c := g.Command(bin, args...)
		c.Env = append(os.Environ(), "GOMEMLIMIT=")
		c.Stderr = &logs
		return c
	}, t.TempDir())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	want := fmt.Sprintf(`msg="memory budget" bytes=%d from=cgroup`, int64(limit*memlimit.CgroupShare))
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("the server's log has no %q:\n%s", want, logs.String())
	}
	n := createKeys(t, ctx, dial(t, cli, 8), "/registry/configmaps/cgroup/", 100000, 64)
	if kills, err := g.OOMKills(); err != nil || kills != 0 {
		t.Fatalf("OOM kills in the cgroup: %d (%v)", kills, err)
	}
	r, err := cli.Get(ctx, "/registry/configmaps/cgroup/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != n {
		t.Fatalf("after %d creates the server counts %v keys (%v)", n, r, err)
	}
	_, peak := memory(t, cmd.Process.Pid)
	t.Logf("%d creates in a %d MiB cgroup: peak RSS %d MiB", n, limit>>20, peak>>20)
}

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer = proctest.Output
