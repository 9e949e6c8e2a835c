package etcdsnap_test

import (
	"testing"

	"go.etcd.io/etcd/server/v3/storage/mvcc"

	"github.com/axon-kv/axon/internal/etcdsnap"
)

// TestBucketKeyIsEtcds: the key-bucket keys read back through etcd's own
// decoder, a deletion's marked as etcd marks a tombstone.
func TestBucketKeyIsEtcds(t *testing.T) {
	for _, tc := range []struct {
		rev, sub  int64
		tombstone bool
	}{{1, 0, false}, {7, 3, true}, {1 << 40, 1 << 33, false}, {1<<63 - 1, 0, true}} {
		k := etcdsnap.BucketKey(tc.rev, tc.sub, tc.tombstone)
		got := mvcc.BytesToBucketKey(k)
		if got.Main != tc.rev || got.Sub != tc.sub || mvcc.IsTombstone(k) != tc.tombstone {
			t.Errorf("BucketKey(%d, %d, %v) = %x: etcd reads r%d.%d tombstone %v", tc.rev, tc.sub, tc.tombstone, k, got.Main, got.Sub, mvcc.IsTombstone(k))
		}
	}
}
