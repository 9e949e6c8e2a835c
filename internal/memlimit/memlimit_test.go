package memlimit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/axon-kv/axon/internal/cgrouptest"
)

const meminfo = "MemTotal:       24684096 kB\nMemFree:        1000 kB\n"

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v1 limit of the process's group", map[string]string{
			"proc/self/cgroup": "5:devices:/\n4:memory:/pods/p1\n0::/\n",
			"sys/fs/cgroup/memory/pods/p1/memory.limit_in_bytes": "536870912\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":         "9223372036854771712\n",
		}, 512 << 20, true},
		{"v1 in a cgroup namespace", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20, true},
		{"v1 controllers mounted together", map[string]string{
			"proc/self/cgroup": "3:cpu,memory:/a\n",
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20, true},
		{"v1 limit of a parent group", map[string]string{
			"proc/self/cgroup": "4:memory:/pods/p1/c1\n",
			"sys/fs/cgroup/memory/pods/p1/c1/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/pods/p1/memory.limit_in_bytes":    "268435456\n",
			"sys/fs/cgroup/memory/pods/memory.limit_in_bytes":       "536870912\n",
		}, 256 << 20, true},
		{"v1 unlimited", map[string]string{
			"proc/self/cgroup": "4:memory:/a\n",
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, false},
		{"v2 limit", map[string]string{
			"proc/self/cgroup":                       "0::/kubepods/pod1\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max": "1073741824\n",
		}, 1 << 30, true},
		{"v2 in a cgroup namespace", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "1073741824\n",
		}, 1 << 30, true},
		{"v2 max", map[string]string{
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "max\n",
		}, 0, false},
		{"hybrid: v2 under unified", map[string]string{
			"proc/self/cgroup":                   "4:memory:/\n0::/a\n",
			"sys/fs/cgroup/unified/a/memory.max": "1073741824\n",
		}, 1 << 30, true},
		{"limit above the machine's memory", map[string]string{
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": strconv.FormatInt(64<<30, 10),
		}, 0, false},
		{"no cgroup filesystem", map[string]string{
			"proc/self/cgroup": "0::/a\n",
		}, 0, false},
		{"garbage (procfs refuses the whole file)", map[string]string{
			"proc/self/cgroup":           "0::/a\nnonsense\n::\n",
			"sys/fs/cgroup/a/memory.max": "lots\n",
		}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["proc/meminfo"] = meminfo
			root := fakeRoot(t, tc.files)
			got, ok := CgroupLimit(root)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("CgroupLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestBudgetPrefersTheFlagThenGOMEMLIMIT(t *testing.T) {
	if b, src := Budget(123 << 20); b != 123<<20 || src != FromFlag {
		t.Fatalf("Budget(flag) = %d, %s", b, src)
	}
	if os.Getenv("MEMLIMIT_HELPER") == "" {
		out, err := helper(t, "TestBudgetPrefersTheFlagThenGOMEMLIMIT", "GOMEMLIMIT=300MiB")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !strings.Contains(out, fmt.Sprintf("budget %d GOMEMLIMIT", 300<<20)) {
			t.Fatalf("with GOMEMLIMIT=300MiB the helper said %q", out)
		}
		return
	}
	b, src := Budget(0)
	fmt.Printf("budget %d %s\n", b, src)
}

// helper runs the named test in a child with env added and
// MEMLIMIT_HELPER set, and returns its output.
func helper(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "MEMLIMIT_HELPER=1"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBudgetFromARealCgroup runs a child process in a memory cgroup with
// a 300 MiB limit (cgroup v1 or v2, as this machine mounts it; root only)
// and checks that it plans for CgroupShare of it.
func TestBudgetFromARealCgroup(t *testing.T) {
	if os.Getenv("MEMLIMIT_HELPER") != "" {
		b, src := Budget(0)
		fmt.Printf("budget %d %s\n", b, src)
		return
	}
	const limit = 300 << 20
	g := cgrouptest.New(t, limit)
	cmd := g.Command(os.Args[0], "-test.run=^TestBudgetFromARealCgroup$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MEMLIMIT_HELPER=1", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := fmt.Sprintf("budget %d cgroup", int64(limit*CgroupShare))
	if !strings.Contains(string(out), want) {
		t.Fatalf("the helper in a %d-byte cgroup said %q, want %q", limit, out, want)
	}
}

// TestDerivedBudget checks the budget the system gives when no flag or
// GOMEMLIMIT sets one: a share of the cgroup's limit, else a share of the
// machine, else none.
func TestDerivedBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		src   Source
	}{
		{"cgroup", map[string]string{
			"proc/meminfo":               meminfo,
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "1073741824\n",
		}, int64((1 << 30) * CgroupShare), FromCgroup},
		{"machine", map[string]string{
			"proc/meminfo":               meminfo,
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "max\n",
		}, int64(24684096 << 10 * MachineShare), FromMachine},
		{"nothing known", map[string]string{}, 0, None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, src := derived(fakeRoot(t, tc.files)); got != tc.want || src != tc.src {
				t.Fatalf("derived = %d, %s; want %d, %s", got, src, tc.want, tc.src)
			}
		})
	}
}

func TestMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"cgroup", map[string]string{
			"proc/meminfo":               meminfo,
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "1073741824\n",
		}, 1 << 30, true},
		{"machine", map[string]string{
			"proc/meminfo":               meminfo,
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "max\n",
		}, 24684096 << 10, true},
		{"nothing known", map[string]string{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := memory(fakeRoot(t, tc.files)); got != tc.want || ok != tc.ok {
				t.Fatalf("memory = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// fakeRoot writes files (path relative to the root: body) under a new
// directory standing for /, and returns it. proc/self is a link to
// process 1's directory, as in /proc.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		if rest, ok := strings.CutPrefix(name, "proc/self/"); ok {
			name = "proc/1/" + rest
			if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("1", filepath.Join(root, "proc/self")); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestShare(t *testing.T) {
	for _, tc := range []struct{ setting, budget, want int64 }{
		{0, 0, 7},         // no budget: the fallback
		{0, 320, 10},      // a 32nd of the budget
		{0, 1 << 40, 100}, // capped
		{-1, 320, 0},      // off
		{55, 1 << 40, 55}, // the setting wins
	} {
		if got := Share(tc.setting, tc.budget, 32, 100, 7); got != tc.want {
			t.Errorf("Share(%d, %d) = %d, want %d", tc.setting, tc.budget, got, tc.want)
		}
	}
}
