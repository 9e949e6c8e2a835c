package tikvserver

import (
	"context"

	"github.com/pingcap/kvproto/pkg/meta_storagepb"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// PD embeds etcd and serves its API on its client URLs; client-go opens
// an etcd client on PD's endpoints at start (for the safe point, should
// PD's GC API be missing) and syncs its member list then and every 30
// seconds. The PD client reads its meta storage to find a resource
// manager running apart from PD, every half second until it finds one.

// etcdCluster answers etcd's member list: PD's one member.
type etcdCluster struct {
	etcdserverpb.UnimplementedClusterServer
	s *Server
}

func (c *etcdCluster) MemberList(context.Context, *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	url := "http://" + c.s.addr
	return &etcdserverpb.MemberListResponse{
		Header:  &etcdserverpb.ResponseHeader{ClusterId: c.s.clusterID, MemberId: memberID},
		Members: []*etcdserverpb.Member{{ID: memberID, Name: "tikv-server", PeerURLs: []string{url}, ClientURLs: []string{url}}},
	}, nil
}

// metaStorage answers that no key is stored: no service runs apart from
// PD.
type metaStorage struct {
	meta_storagepb.UnimplementedMetaStorageServer
	s *Server
}

func (m *metaStorage) Get(context.Context, *meta_storagepb.GetRequest) (*meta_storagepb.GetResponse, error) {
	return &meta_storagepb.GetResponse{Header: &meta_storagepb.ResponseHeader{ClusterId: m.s.clusterID}}, nil
}
