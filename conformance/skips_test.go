package conformance

import (
	"os"
	"strings"
	"testing"
)

// Reasons shared by several skips; README.md has the failure details.
const (
	axonRev0 = "axon: a store that has never been written reports header revision 0 " +
		"(etcd: 1), so the first LIST fails with \"illegal resource version from storage: 0\", see README"
	axonRev1Write = "axon: the first write gets revision 1 (etcd: 2), so the parallel \"RV=1\" watch " +
		"cases miss the pod that won revision 1 (flaky), see README"
	axonPrevKV = "axon: watch event carries prev_kv although its previous revision is compacted " +
		"(etcd omits it), so a watch from a compacted RV does not fail, see README"
	axonProgress    = "axon: no periodic watch progress notifications (known gap), see README"
	axonRangeStream = "axon: RangeStream RPC answers Unimplemented; the store falls back to Range " +
		"but the extra probe breaks the request count, see README"
)

// skips lists, per backend, the tests (by their name below the backend,
// a prefix match on whole path segments) that are known to fail there.
// Set AXON_CONFORMANCE_NO_SKIP=1 to run them anyway.
var skips = map[string]map[string]string{
	"axon": {
		"List":                               axonRev0,
		"CompactRevision":                    axonRev0,
		"Stats":                              axonRev0,
		"Watch":                              axonRev0,
		"ClusterScopedWatch":                 axonRev0,
		"NamespaceScopedWatch":               axonRev0,
		"WatchError":                         axonRev0,
		"WatcherTimeout":                     axonRev0,
		"WatchSemantics":                     axonRev1Write,
		"WatchSemanticsWithConcurrentDecode": axonRev1Write,
		"WatchFromZero":                      axonPrevKV,
		"ProgressNotify":                     axonProgress,
		"ListContinuation/rangeStream=true":  axonRangeStream,
	},
}

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
