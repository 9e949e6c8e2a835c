package conformance

import (
	"os"
	"strings"
	"testing"
)

// skips lists, per backend, the tests (by their name below the backend,
// a prefix match on whole path segments) that are known to fail there,
// with the reason. Empty: every test passes on both backends. Set
// AXON_CONFORMANCE_NO_SKIP=1 to run listed tests anyway.
var skips = map[string]map[string]string{}

// skipKnown skips t when its path below TestConformance/<backend>/ is listed in skips.
func skipKnown(t *testing.T, b backend) {
	t.Helper()
	if os.Getenv("AXON_CONFORMANCE_NO_SKIP") != "" {
		return
	}
	_, rel, ok := strings.Cut(t.Name(), "/"+b.name+"/")
	if !ok {
		return
	}
	for name, why := range skips[b.name] {
		if rel == name || strings.HasPrefix(rel, name+"/") {
			t.Skip(why)
		}
	}
}
