package bench

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

// memCgroup is a memory-limited control group a server runs in, the way
// a pod's limits.memory holds it. cgrouptest does the same for tests; the
// benchmark needs it outside a testing.T.
type memCgroup struct {
	dir string
	v2  bool
}

// ErrNoCgroup means a memory cgroup cannot be made here: not root, or no
// memory controller mounted.
var ErrNoCgroup = errors.New("no memory cgroup: needs root and a mounted memory controller")

// cgroupRoot is where a new group goes: the v2 hierarchy, else v1's
// memory controller, else "".
func cgroupRoot() (dir string, v2 bool) {
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

// CgroupAvailable reports whether the scale scenarios can put servers in
// memory cgroups on this machine.
func CgroupAvailable() bool {
	dir, _ := cgroupRoot()
	return dir != ""
}

// newMemCgroup makes a group named name limited to limit bytes.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	root, v2 := cgroupRoot()
	if root == "" {
		return nil, ErrNoCgroup
	}
	g := &memCgroup{dir: filepath.Join(root, fmt.Sprintf("%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())), v2: v2}
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

// command runs bin inside the group: a shell moves itself in and execs
// bin, so that no allocation of the server happens outside.
func (g *memCgroup) command(bin string, args ...string) *exec.Cmd {
	var b strings.Builder
	for _, a := range append([]string{bin}, args...) {
		b.WriteString(" '" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return exec.Command("/bin/sh", "-c", fmt.Sprintf("echo $$ > '%s' && exec%s", filepath.Join(g.dir, "cgroup.procs"), b.String()))
}

// oomKills is how many processes the kernel killed in the group for want
// of memory.
func (g *memCgroup) oomKills() (int, error) {
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	v, err := g.field(file, "oom_kill")
	return int(v), err
}

// peak is the group's highest charge so far, page cache included (the
// kernel reclaims that before it kills); 0 where the kernel keeps none
// (v2 before Linux 5.19).
func (g *memCgroup) peak() int64 {
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
func (g *memCgroup) field(file, name string) (int64, error) {
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

// remove kills what is left in the group and removes it.
func (g *memCgroup) remove() error {
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
