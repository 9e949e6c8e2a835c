// Package memlimit decides how much memory an Axon server plans for when
// its operator did not say: the soft limit given to Go (GOMEMLIMIT) or,
// failing that, the memory limit of the control group the process runs
// in (a Kubernetes pod's limits.memory), failing that a share of the
// machine's memory: a server on a laptop never grows without bound.
package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Source says where a budget came from.
type Source string

const (
	FromFlag       Source = "flag"
	FromGOMEMLIMIT Source = "GOMEMLIMIT"
	FromCgroup     Source = "cgroup"
	FromMachine    Source = "machine"
	None           Source = "none"
)

// CgroupShare is the part of a control group's limit a derived budget
// takes: the kernel charges the group for the page cache of Badger's
// mmapped tables and logs too, and the process has memory outside Go's
// heap.
const CgroupShare = 0.75

// MachineShare is the part of the machine's memory a budget takes when
// nothing else sets one: a store shares a machine with other programs,
// and the page cache of its files makes it faster than heap would.
const MachineShare = 0.5

// Budget returns the memory budget to run with: flag if positive (none
// if negative), else the soft limit Go was started with (GOMEMLIMIT),
// else CgroupShare of the memory limit of this process's control group,
// else MachineShare of the machine's memory, else 0 (None).
func Budget(flag int64) (int64, Source) {
	switch {
	case flag > 0:
		return flag, FromFlag
	case flag < 0:
		return 0, FromFlag // no budget, whatever the environment says
	}
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 {
		return lim, FromGOMEMLIMIT
	}
	return derived("/")
}

// derived is the budget the system gives, with the root of /proc and
// /sys at root ("/" but for tests).
func derived(root string) (int64, Source) {
	if lim, ok := CgroupLimit(root); ok {
		return int64(float64(lim) * CgroupShare), FromCgroup
	}
	if fs, err := procfs.NewFS(filepath.Join(root, "proc")); err == nil {
		if total, ok := memTotal(fs); ok {
			return int64(float64(total) * MachineShare), FromMachine
		}
	}
	return 0, None
}

// Memory returns the memory this process can have, its page cache
// included: its control group's limit, else the machine's memory; false
// if neither can be read.
func Memory() (int64, bool) { return memory("/") }

func memory(root string) (int64, bool) {
	if lim, ok := CgroupLimit(root); ok {
		return lim, true
	}
	fs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return 0, false
	}
	return memTotal(fs)
}

// CgroupLimit returns the memory limit of the control group this process
// belongs to, reading /proc/self/cgroup and the cgroup filesystem under
// root ("/" but for tests); false when there is none (unlimited, no
// cgroup filesystem, or a limit no smaller than the machine's memory).
func CgroupLimit(root string) (int64, bool) {
	fs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return 0, false
	}
	self, err := fs.Self()
	if err != nil {
		return 0, false
	}
	groups, err := self.Cgroups()
	if err != nil {
		return 0, false
	}
	best, found := int64(math.MaxInt64), false
	for _, c := range memberships(groups) {
		// A group is held to its ancestors' limits too; inside a cgroup
		// namespace the path is "/" and the mount is the group itself.
		for dir := c.path; ; dir = filepath.Dir(dir) {
			raw, err := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", c.mount, dir, c.file))
			if lim, ok := parseLimit(raw); err == nil && ok && lim < best {
				best, found = lim, true
			}
			if dir == "/" {
				break
			}
		}
	}
	if !found {
		return 0, false
	}
	if total, ok := memTotal(fs); ok && best >= total {
		return 0, false
	}
	return best, true
}

// membership is one control group a process is in, with where its
// memory limit lives.
type membership struct {
	mount, path, file string
}

// memberships are the groups of /proc/self/cgroup whose memory limit
// counts: cgroup v1's memory controller ("4:memory:/a/b") first, then
// v2's unified hierarchy ("0::/a/b").
func memberships(groups []procfs.Cgroup) []membership {
	var v1, v2 []membership
	for _, g := range groups {
		if !strings.HasPrefix(g.Path, "/") {
			continue
		}
		switch {
		case g.HierarchyID == 0 && len(g.Controllers) == 0:
			v2 = append(v2, membership{mount: "", path: g.Path, file: "memory.max"},
				membership{mount: "unified", path: g.Path, file: "memory.max"})
		case slices.Contains(g.Controllers, "memory"):
			v1 = append(v1, membership{mount: "memory", path: g.Path, file: "memory.limit_in_bytes"})
		}
	}
	return append(v1, v2...)
}

// parseLimit reads a cgroup memory limit: a byte count, or "max" (v2) or
// a near-MaxInt64 page-rounded value (v1) for none. Hand-written: procfs
// reads /proc, not the cgroup filesystem, and its sysfs package has no
// memory controller files.
func parseLimit(b []byte) (int64, bool) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64-1<<20 {
		return 0, false
	}
	return n, true
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal(fs procfs.FS) (int64, bool) {
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil {
		return 0, false
	}
	return int64(*mi.MemTotalBytes), true
}

// Share is the bound a memory setting gives: the setting if given
// (negative: none, 0), else 1/part of the budget up to most, or without
// when there is no budget.
func Share(setting, budget, part, most, without int64) int64 {
	switch {
	case setting != 0:
		return max(setting, 0)
	case budget > 0:
		return min(budget/part, most)
	}
	return without
}
