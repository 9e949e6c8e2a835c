// Package cgroup makes memory-limited control groups, on cgroup v1 or v2
// as the machine mounts them, and starts processes in them: how a
// Kubernetes pod's limits.memory looks from inside. The benchmark's scale
// scenarios and the tests (through cgrouptest) use it.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Group is a memory-limited control group.
type Group struct {
	dir string
	v2  bool
}

// ErrUnavailable means a memory cgroup cannot be made here: not root, or
// no memory controller mounted.
var ErrUnavailable = errors.New("no memory cgroup: needs root and a mounted memory controller")

// root is where a new group goes: the v2 hierarchy, else v1's
// memory controller, else "".
func root() (dir string, v2 bool) {
	if os.Geteuid() != 0 {
		return "", false
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "/sys/fs/cgroup", true
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return "/sys/fs/cgroup/memory", false
	}
	return "", false
}

// Available reports whether memory cgroups can be made here.
func Available() bool {
	dir, _ := root()
	return dir != ""
}

// New makes a group named after name limited to limit bytes; Remove
// removes it.
func New(name string, limit int64) (*Group, error) {
	r, v2 := root()
	if r == "" {
		return nil, ErrUnavailable
	}
	g := &Group{dir: filepath.Join(r, fmt.Sprintf("%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())), v2: v2}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = os.Remove(g.dir)
		return nil, fmt.Errorf("limit cgroup memory: %w", err)
	}
	return g, nil
}

// Command runs bin inside the group: a shell moves itself in and execs
// bin, so that no allocation of the process happens outside.
func (g *Group) Command(bin string, args ...string) *exec.Cmd {
	var b strings.Builder
	for _, a := range append([]string{bin}, args...) {
		b.WriteString(" '" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return exec.Command("/bin/sh", "-c", fmt.Sprintf("echo $$ > '%s' && exec%s", filepath.Join(g.dir, "cgroup.procs"), b.String()))
}

// OOMKills is how many processes the kernel killed in the group for want
// of memory.
func (g *Group) OOMKills() (int, error) {
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	v, err := g.field(file, "oom_kill")
	return int(v), err
}

// Peak is the group's highest charge so far, page cache included (the
// kernel reclaims that before it kills); 0 where the kernel keeps none
// (v2 before Linux 5.19).
func (g *Group) Peak() int64 {
	file := "memory.max_usage_in_bytes"
	if g.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// field reads "name value" from a flat-keyed cgroup file.
func (g *Group) field(file, name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, file)
}

// Remove kills what is left in the group and removes it.
func (g *Group) Remove() error {
	var err error
	for range 50 {
		b, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		for f := range strings.FieldsSeq(string(b)) {
			if pid, perr := strconv.Atoi(f); perr == nil {
				if p, ferr := os.FindProcess(pid); ferr == nil {
					_ = p.Kill()
				}
			}
		}
		if err = os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the killed processes' exit
	}
	return fmt.Errorf("remove cgroup: %w", err)
}
