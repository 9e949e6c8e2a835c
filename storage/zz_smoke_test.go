package storage_test

import (
	"testing"

	"github.com/tikv/client-go/v2/testutils"
	"github.com/tikv/client-go/v2/tikv"
	"go.etcd.io/etcd/server/v3/embed"
)

func TestSmokeDeps(t *testing.T) {
	client, cluster, pd, err := testutils.NewMockTiKV("", nil)
	if err != nil {
		t.Fatal(err)
	}
	testutils.BootstrapWithMultiRegions(cluster, []byte("b"), []byte("c"))
	s, err := tikv.NewTestTiKVStore(client, pd, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = embed.NewConfig()
}
