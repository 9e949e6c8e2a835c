package tikvserver

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pingcap/kvproto/pkg/metapb"
	"github.com/pingcap/kvproto/pkg/pdpb"
	"github.com/tikv/pd/client/clients/router"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pdService answers the PD calls client-go and the PD client make, from
// the mock cluster. One member, always the leader, at the server's
// address.
type pdService struct {
	pdpb.UnimplementedPDServer
	s *Server
}

// memberID names the one PD member.
const memberID = 1

func (p *pdService) header() *pdpb.ResponseHeader {
	return &pdpb.ResponseHeader{ClusterId: p.s.clusterID}
}

func (p *pdService) member() *pdpb.Member {
	url := "http://" + p.s.addr
	return &pdpb.Member{Name: "tikv-server", MemberId: memberID, ClientUrls: []string{url}, PeerUrls: []string{url}}
}

// checkCluster refuses a PD request meant for another cluster (the one an
// earlier process served), as PD does. Members and cluster info are asked
// before the client knows the ID.
func (s *Server) checkCluster(method string, req any) error {
	if !strings.HasPrefix(method, "/pdpb.PD/") {
		return nil
	}
	h, ok := req.(interface{ GetHeader() *pdpb.RequestHeader })
	if !ok {
		return nil
	}
	if id := h.GetHeader().GetClusterId(); id != 0 && id != s.clusterID {
		return status.Errorf(codes.FailedPrecondition, "mismatch cluster id, need %d but got %d", s.clusterID, id)
	}
	return nil
}

func (p *pdService) GetMembers(context.Context, *pdpb.GetMembersRequest) (*pdpb.GetMembersResponse, error) {
	m := p.member()
	return &pdpb.GetMembersResponse{Header: p.header(), Members: []*pdpb.Member{m}, Leader: m, EtcdLeader: m}, nil
}

func (p *pdService) GetClusterInfo(context.Context, *pdpb.GetClusterInfoRequest) (*pdpb.GetClusterInfoResponse, error) {
	return &pdpb.GetClusterInfoResponse{Header: p.header(), ServiceModes: []pdpb.ServiceMode{pdpb.ServiceMode_PD_SVC_MODE}}, nil
}

// Tso answers each request of the stream with the last of Count fresh
// timestamps, as PD does.
func (p *pdService) Tso(stream pdpb.PD_TsoServer) error {
	return eachRequest(stream.Recv, func(req *pdpb.TsoRequest) error { return p.tso(stream.Context(), stream, req) })
}

// eachRequest answers each request recv gives with answer, until the
// client ends the stream or an answer fails.
func eachRequest[R any](recv func() (R, error), answer func(R) error) error {
	for {
		req, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := answer(req); err != nil {
			return err
		}
	}
}

// tso answers one request of a Tso stream.
func (p *pdService) tso(ctx context.Context, stream pdpb.PD_TsoServer, req *pdpb.TsoRequest) error {
	defer p.s.load.begin(TSO)()
	if id := req.GetHeader().GetClusterId(); id != 0 && id != p.s.clusterID {
		return status.Errorf(codes.FailedPrecondition, "mismatch cluster id, need %d but got %d", p.s.clusterID, id)
	}
	if req.GetCount() == 0 || req.GetCount() >= 1<<logicalBits {
		return status.Errorf(codes.InvalidArgument, "tso count %d: want 1 to %d", req.GetCount(), 1<<logicalBits-1)
	}
	p.s.load.addTimestamps(req.GetCount())
	if err := p.s.wait(ctx); err != nil {
		return err
	}
	physical, logical := p.s.tso.next(req.GetCount())
	return stream.Send(&pdpb.TsoResponse{
		Header:    p.header(),
		Count:     req.GetCount(),
		Timestamp: &pdpb.Timestamp{Physical: physical, Logical: logical},
	})
}

// QueryRegion is the PD client's batched region lookup (its router
// client): each request asks for regions by key, by previous key and by
// ID, and one response answers them all.
func (p *pdService) QueryRegion(stream pdpb.PD_QueryRegionServer) error {
	return eachRequest(stream.Recv, func(req *pdpb.QueryRegionRequest) error {
		return p.queryRegion(stream.Context(), stream, req)
	})
}

// queryRegion answers one request of a QueryRegion stream.
func (p *pdService) queryRegion(ctx context.Context, stream pdpb.PD_QueryRegionServer, req *pdpb.QueryRegionRequest) error {
	defer p.s.load.begin("PD/QueryRegion")()
	if id := req.GetHeader().GetClusterId(); id != 0 && id != p.s.clusterID {
		return status.Errorf(codes.FailedPrecondition, "mismatch cluster id, need %d but got %d", p.s.clusterID, id)
	}
	if err := p.s.wait(ctx); err != nil {
		return err
	}
	resp := &pdpb.QueryRegionResponse{Header: p.header(), RegionsById: map[uint64]*pdpb.RegionResponse{}}
	add := func(region *metapb.Region, leader *metapb.Peer, buckets *metapb.Buckets, down []*metapb.Peer) uint64 {
		if region == nil {
			return 0
		}
		r := &pdpb.RegionResponse{Region: region, Leader: leader, DownPeers: peerStats(down)}
		if req.GetNeedBuckets() {
			r.Buckets = buckets
		}
		resp.RegionsById[region.GetId()] = r
		return region.GetId()
	}
	for _, key := range req.GetKeys() {
		resp.KeyIdMap = append(resp.KeyIdMap, add(p.s.cluster.GetRegionByKey(key)))
	}
	for _, key := range req.GetPrevKeys() {
		resp.PrevKeyIdMap = append(resp.PrevKeyIdMap, add(p.s.cluster.GetPrevRegionByKey(key)))
	}
	for _, id := range req.GetIds() {
		add(p.s.cluster.GetRegionByID(id))
	}
	return stream.Send(resp)
}

func (p *pdService) GetRegion(_ context.Context, req *pdpb.GetRegionRequest) (*pdpb.GetRegionResponse, error) {
	region, leader, buckets, down := p.s.cluster.GetRegionByKey(req.GetRegionKey())
	return p.regionResponse(region, leader, buckets, down, req.GetNeedBuckets()), nil
}

func (p *pdService) GetPrevRegion(_ context.Context, req *pdpb.GetRegionRequest) (*pdpb.GetRegionResponse, error) {
	region, leader, buckets, down := p.s.cluster.GetPrevRegionByKey(req.GetRegionKey())
	return p.regionResponse(region, leader, buckets, down, req.GetNeedBuckets()), nil
}

func (p *pdService) GetRegionByID(_ context.Context, req *pdpb.GetRegionByIDRequest) (*pdpb.GetRegionResponse, error) {
	region, leader, buckets, down := p.s.cluster.GetRegionByID(req.GetRegionId())
	return p.regionResponse(region, leader, buckets, down, req.GetNeedBuckets()), nil
}

func (p *pdService) regionResponse(region *metapb.Region, leader *metapb.Peer, buckets *metapb.Buckets, down []*metapb.Peer, needBuckets bool) *pdpb.GetRegionResponse {
	resp := &pdpb.GetRegionResponse{Header: p.header(), Region: region, Leader: leader, DownPeers: peerStats(down)}
	if needBuckets {
		resp.Buckets = buckets
	}
	return resp
}

func peerStats(peers []*metapb.Peer) []*pdpb.PeerStats {
	var out []*pdpb.PeerStats
	for _, p := range peers {
		out = append(out, &pdpb.PeerStats{Peer: p})
	}
	return out
}

func (p *pdService) ScanRegions(_ context.Context, req *pdpb.ScanRegionsRequest) (*pdpb.ScanRegionsResponse, error) {
	resp := &pdpb.ScanRegionsResponse{Header: p.header()}
	for _, r := range p.s.cluster.ScanRegions(req.GetStartKey(), req.GetEndKey(), int(req.GetLimit())) {
		resp.Regions = append(resp.Regions, pdRegion(r, false))
		resp.RegionMetas = append(resp.RegionMetas, r.Meta)
		resp.Leaders = append(resp.Leaders, r.Leader)
	}
	return resp, nil
}

// BatchScanRegions returns the regions of each range in order, each
// region once, at most Limit in all.
func (p *pdService) BatchScanRegions(_ context.Context, req *pdpb.BatchScanRegionsRequest) (*pdpb.BatchScanRegionsResponse, error) {
	resp := &pdpb.BatchScanRegionsResponse{Header: p.header()}
	limit := int(req.GetLimit())
	seen := map[uint64]bool{}
	for _, kr := range req.GetRanges() {
		for _, r := range p.s.cluster.ScanRegions(kr.GetStartKey(), kr.GetEndKey(), 0) {
			if seen[r.Meta.GetId()] {
				continue
			}
			if limit > 0 && len(resp.Regions) >= limit {
				return resp, nil
			}
			seen[r.Meta.GetId()] = true
			resp.Regions = append(resp.Regions, pdRegion(r, req.GetNeedBuckets()))
		}
	}
	return resp, nil
}

func pdRegion(r *router.Region, needBuckets bool) *pdpb.Region {
	out := &pdpb.Region{Region: r.Meta, Leader: r.Leader, DownPeers: peerStats(r.DownPeers), PendingPeers: r.PendingPeers}
	if needBuckets {
		out.Buckets = r.Buckets
	}
	return out
}

func (p *pdService) GetStore(_ context.Context, req *pdpb.GetStoreRequest) (*pdpb.GetStoreResponse, error) {
	store := p.s.cluster.GetStore(req.GetStoreId())
	if store == nil {
		return &pdpb.GetStoreResponse{Header: p.errorHeader(pdpb.ErrorType_UNKNOWN, "invalid store ID, not found")}, nil
	}
	return &pdpb.GetStoreResponse{Header: p.header(), Store: store}, nil
}

func (p *pdService) GetAllStores(_ context.Context, req *pdpb.GetAllStoresRequest) (*pdpb.GetAllStoresResponse, error) {
	resp := &pdpb.GetAllStoresResponse{Header: p.header()}
	for _, st := range p.s.cluster.GetAllStores() {
		if req.GetExcludeTombstoneStores() && st.GetState() == metapb.StoreState_Tombstone {
			continue
		}
		resp.Stores = append(resp.Stores, st)
	}
	return resp, nil
}

func (p *pdService) errorHeader(typ pdpb.ErrorType, msg string) *pdpb.ResponseHeader {
	h := p.header()
	h.Error = &pdpb.Error{Type: typ, Message: msg}
	return h
}

// GetGCState reports that GC has never run: client-go reads the txn safe
// point at start and then periodically, and without this call would fall
// back to reading PD's etcd directly.
func (p *pdService) GetGCState(_ context.Context, req *pdpb.GetGCStateRequest) (*pdpb.GetGCStateResponse, error) {
	return &pdpb.GetGCStateResponse{Header: p.header(), GcState: &pdpb.GCState{KeyspaceScope: req.GetKeyspaceScope()}}, nil
}

// logicalBits is the width of a timestamp's logical part, as PD and
// client-go's oracle compose them.
const logicalBits = 18

// tso hands out timestamps: physical milliseconds of the wall clock (or
// ahead of it, never back) and a logical counter within each.
type tso struct {
	mu       sync.Mutex
	physical int64
	logical  int64
}

// next reserves count timestamps and returns the last of them.
func (t *tso) next(count uint32) (physical, logical int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now().UnixMilli(); now > t.physical {
		t.physical, t.logical = now, 0
	}
	if t.logical+int64(count) >= 1<<logicalBits {
		t.physical, t.logical = t.physical+1, 0
	}
	t.logical += int64(count)
	return t.physical, t.logical
}
