package tikvserver

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServerBinaryLeavesItOut asks the go tool for the server binary's
// dependencies: the endpoint is tooling (axon-bench tikv-server), and
// the axon binary never links it.
func TestServerBinaryLeavesItOut(t *testing.T) {
	const self = "github.com/axon-kv/axon/internal/tikvserver"
	out, err := exec.Command("go", "list", "-deps", "github.com/axon-kv/axon/cmd/axon").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == self {
			t.Errorf("axon depends on %s", dep)
		}
	}
}
