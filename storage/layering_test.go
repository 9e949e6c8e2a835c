package storage_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStorageKnowsNothingOfCore asks the go tool for the dependencies of
// every storage package: calls go one way (driver uses core and storage),
// and what an engine needs of core's key layout its caller hands it
// (tikv.MockOptions.Layout).
func TestStorageKnowsNothingOfCore(t *testing.T) {
	const core = "github.com/axon-kv/axon/core"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Deps " "}}`, "github.com/axon-kv/axon/storage/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ":")
		for _, dep := range strings.Fields(deps) {
			if dep == core || strings.HasPrefix(dep, core+"/") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
