// Package memlimit decides how much memory an Axon server plans for when
// its operator did not say: the soft limit given to Go (GOMEMLIMIT) or,
// failing that, the memory limit of the control group the process runs
// in (a Kubernetes pod's limits.memory), failing that a share of the
// machine's memory: a server on a laptop never grows without bound.
package memlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
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
	if total, ok := memTotal(root); ok {
		return int64(float64(total) * MachineShare), FromMachine
	}
	return 0, None
}

// CgroupLimit returns the memory limit of the control group this process
// belongs to, reading /proc/self/cgroup and the cgroup filesystem under
// root ("/" but for tests); false when there is none (unlimited, no
// cgroup filesystem, or a limit no smaller than the machine's memory).
func CgroupLimit(root string) (int64, bool) {
	self, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	best, found := int64(math.MaxInt64), false
	for _, c := range parseMembership(self) {
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
	if total, ok := memTotal(root); ok && best >= total {
		return 0, false
	}
	return best, true
}

// membership is one control group a process is in, with where its
// memory limit lives.
type membership struct {
	mount, path, file string
}

// parseMembership reads /proc/self/cgroup: cgroup v1's memory controller
// ("4:memory:/a/b") first, then v2's unified hierarchy ("0::/a/b").
func parseMembership(b []byte) []membership {
	var v1, v2 []membership
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(path, "/") {
			continue
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = append(v2, membership{mount: "", path: path, file: "memory.max"},
				membership{mount: "unified", path: path, file: "memory.max"})
		case slices.Contains(strings.Split(ctrls, ","), "memory"):
			v1 = append(v1, membership{mount: "memory", path: path, file: "memory.limit_in_bytes"})
		}
	}
	return append(v1, v2...)
}

// parseLimit reads a cgroup memory limit: a byte count, or "max" (v2) or
// a near-MaxInt64 page-rounded value (v1) for none.
func parseLimit(b []byte) (int64, bool) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64-1<<20 {
		return 0, false
	}
	return n, true
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal(root string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return kb << 10, true
		}
	}
	return 0, false
}
