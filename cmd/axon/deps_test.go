package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServerBinaryLeavesToolingOut asks the go tool for the binary's
// dependencies: the benchmark and the etcd it compares with live in
// axon-bench, and the server binary links neither.
func TestServerBinaryLeavesToolingOut(t *testing.T) {
	const (
		bench   = "github.com/axon-kv/axon/cmd/axon-bench"
		etcdRef = "go.etcd.io/etcd/server/v3/embed"
	)
	out, err := exec.Command("go", "list", "-deps", "github.com/axon-kv/axon/cmd/axon").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == etcdRef || dep == bench || strings.HasPrefix(dep, bench+"/") {
			t.Errorf("axon depends on %s", dep)
		}
	}
}
