// Package cgrouptest makes memory-limited control groups for tests, on
// cgroup v1 or v2 as the machine mounts them, and starts processes in
// them: how a Kubernetes pod's limits.memory looks from inside.
package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Group is a memory cgroup made for one test.
type Group struct {
	dir string
	v2  bool
}

// New makes a cgroup limited to limit bytes and removes it when the test
// ends; it skips the test where that is impossible (not root, no memory
// controller).
func New(t testing.TB, limit int64) *Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	g := &Group{}
	switch {
	case exists("/sys/fs/cgroup/cgroup.controllers"):
		g.dir, g.v2 = "/sys/fs/cgroup", true
	case exists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		g.dir = "/sys/fs/cgroup/memory"
	default:
		t.Skip("no cgroup memory controller mounted")
	}
	g.dir = filepath.Join(g.dir, fmt.Sprintf("axon-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { g.remove(t) })
	if err := os.WriteFile(filepath.Join(g.dir, g.limitFile()), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Skipf("cannot limit the cgroup's memory: %v", err)
	}
	return g
}

func (g *Group) limitFile() string {
	if g.v2 {
		return "memory.max"
	}
	return "memory.limit_in_bytes"
}

// Command returns a command that runs name with args inside the group: a
// shell moves itself in and then execs it, so that nothing runs outside.
func (g *Group) Command(name string, args ...string) *exec.Cmd {
	quoted := make([]string, 0, len(args)+1)
	for _, a := range append([]string{name}, args...) {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	script := fmt.Sprintf("echo $$ > '%s' && exec %s", filepath.Join(g.dir, "cgroup.procs"), strings.Join(quoted, " "))
	return exec.Command("/bin/sh", "-c", script)
}

// OOMKills reports how many processes the kernel killed in the group for
// want of memory.
func (g *Group) OOMKills() (int, error) {
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			return strconv.Atoi(n)
		}
	}
	return 0, errors.New("cgrouptest: no oom_kill count in " + file)
}

// remove kills what is left in the group and removes it.
func (g *Group) remove(t testing.TB) {
	for range 50 {
		b, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
		if err := os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond) // the killed processes' exit
	}
	t.Errorf("cgrouptest: could not remove %s", g.dir)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
