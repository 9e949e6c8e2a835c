package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// built holds the binaries the tests run, built once per test process.
var built struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildBench builds axon and axon-bench into one directory, so that
// axon-bench finds axon beside it as it does in bin/, and returns
// axon-bench's path. The tests share the build: each link of the two
// binaries takes seconds.
func buildBench(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "axon-bench-test-"); built.err != nil {
			return
		}
		built.out, built.err = exec.Command("go", "build", "-o", built.dir+string(os.PathSeparator),
			"github.com/axon-kv/axon/cmd/axon", "github.com/axon-kv/axon/cmd/axon-bench").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("build axon and axon-bench: %v\n%s", built.err, built.out)
	}
	return filepath.Join(built.dir, "axon-bench")
}
