package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// Instances announce themselves in the engine, outside the revisioned
// keyspace, so that any of them can list the others (MemberList) and a
// leader can pick a successor. A record not renewed for presenceTTL
// leases is a gone instance.
const (
	presencePrefix = "member/"
	presenceTTL    = 3
)

// presence is one instance's announcement.
type presence struct {
	Name       string   `json:"name"`
	Instance   string   `json:"instance"` // the ID in the election record
	MemberID   uint64   `json:"member_id"`
	ClientURLs []string `json:"client_urls"`
	PeerURLs   []string `json:"peer_urls,omitempty"`
	Expires    int64    `json:"expires"` // unix nanoseconds
}

func (p presence) addr() string { return peerAddr(p.PeerURLs, p.ClientURLs) }

// announce writes this instance's presence every renewal until the
// server closes, then removes it.
func (s *Server) announce() {
	defer s.bg.work.Done()
	every := s.mcfg.RenewEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.writePresence(s.ctx, false); err != nil && s.ctx.Err() == nil {
			s.log.Warn("announce", "err", err)
		}
		select {
		case <-t.C:
		case <-s.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.writePresence(ctx, true)
			cancel()
			return
		}
	}
}

func (s *Server) writePresence(ctx context.Context, remove bool) error {
	s.urlsMu.Lock()
	p := presence{Name: s.cfg.Name, Instance: s.id, MemberID: s.cfg.MemberID, ClientURLs: s.cfg.ClientURLs, PeerURLs: s.cfg.PeerURLs,
		Expires: time.Now().Add(presenceTTL * s.mcfg.Lease).UnixNano()}
	s.urlsMu.Unlock()
	txn, err := s.eng.Begin(ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	key := core.MetaKey(presencePrefix + s.cfg.Name)
	if remove {
		err = txn.Delete(key)
	} else {
		v, _ := json.Marshal(p)
		err = txn.Set(key, v)
	}
	if err != nil {
		return err
	}
	return txn.Commit(ctx)
}

// members lists the instances alive now, by name.
func (s *Server) members(ctx context.Context) ([]presence, error) {
	txn, err := s.eng.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer txn.Rollback()
	it, err := txn.Iter(storage.IterOptions{Lower: core.MetaKey(presencePrefix), Upper: core.MetaKey(strings.TrimSuffix(presencePrefix, "/") + "0")})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	now := time.Now().UnixNano()
	var out []presence
	for it.Next() {
		var p presence
		if json.Unmarshal(it.Value(), &p) == nil && p.Expires > now {
			out = append(out, p)
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b presence) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// leaderID returns the member ID of the leader this instance believes
// in (0: none known).
func (s *Server) leaderID(ctx context.Context) uint64 {
	st := s.drv.Status()
	rec, ok := st.Leader, st.HasLeader
	if !ok {
		return 0
	}
	if rec.Holder == s.id {
		return s.cfg.MemberID
	}
	ms, _ := s.members(ctx)
	for _, p := range ms {
		if p.Instance == rec.Holder {
			return p.MemberID
		}
	}
	return 0
}

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	// With auth on, etcd lists members for an authenticated caller only
	// (its requireAuthInfo): their URLs are no one else's business.
	if err := c.s.authorize(ctx, nil, false, someUser); err != nil {
		return nil, toGRPC(err)
	}
	ms, err := c.s.members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	// etcd's cluster answers carry no revision.
	resp := &pb.MemberListResponse{Header: c.s.header(0)}
	c.s.urlsMu.Lock()
	urls, peerURLs := c.s.cfg.ClientURLs, c.s.cfg.PeerURLs
	c.s.urlsMu.Unlock()
	seen := false
	for _, p := range ms {
		if p.MemberID == c.s.cfg.MemberID {
			// This instance's own URLs are the ones it holds now: the
			// record may predate SetClientURLs.
			p.ClientURLs, p.PeerURLs, seen = urls, peerURLs, true
		}
		resp.Members = append(resp.Members, member(p.MemberID, p.Name, p.ClientURLs, p.PeerURLs))
	}
	if !seen {
		// Not announced yet (just started): list this instance anyway.
		resp.Members = append(resp.Members, member(c.s.cfg.MemberID, c.s.cfg.Name, urls, peerURLs))
	}
	return resp, nil
}

// member is an instance as MemberList shows it. Peer URLs are where
// instances forward to each other (they share an engine, not a raft
// log); without any, they reach each other at the client URLs, and
// those are listed, since etcd always lists peer URLs.
func member(id uint64, name string, clientURLs, peerURLs []string) *pb.Member {
	if len(peerURLs) == 0 {
		peerURLs = clientURLs
	}
	return &pb.Member{ID: id, Name: name, ClientURLs: clientURLs, PeerURLs: peerURLs}
}

// errNoSuccessor: a transfer found no other live instance.
var errNoSuccessor = errors.New("axon: no other instance to hand leadership to")

// transferTo hands leadership to the instance with member ID target (0:
// any live one) and waits until it leads or the wait runs out. Only the
// leader transfers; others get core.ErrNotLeader.
func (s *Server) transferTo(ctx context.Context, target uint64) error {
	if !s.Leading() {
		return core.ErrNotLeader
	}
	if target == s.cfg.MemberID {
		return nil
	}
	ms, err := s.members(ctx)
	if err != nil {
		return err
	}
	var to *presence
	for i, p := range ms {
		if p.Instance != s.id && p.addr() != "" && (target == 0 || p.MemberID == target) {
			to = &ms[i]
			break
		}
	}
	if to == nil {
		if target == 0 {
			return errNoSuccessor
		}
		return rpctypes.ErrGRPCBadLeaderTransferee
	}
	s.log.Info("transferring leadership", "to", to.Name)
	ch := make(chan error, 1)
	s.drv.Transfer(to.Instance, to.addr(), func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handoff gives leadership to another live instance before this one
// stops (SIGTERM), so clients see no error and watches resume at once. It
// does nothing when this instance does not lead or is alone.
func (s *Server) Handoff(ctx context.Context) error {
	err := s.transferTo(ctx, 0)
	if errors.Is(err, core.ErrNotLeader) || errors.Is(err, errNoSuccessor) {
		return nil
	}
	return err
}

// moveLeader is MoveLeader on the leader, forwarded from elsewhere.
func (s *Server) moveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return forward(s, ctx, func() (*pb.MoveLeaderResponse, error) {
		if err := s.transferTo(ctx, r.TargetID); err != nil {
			return nil, err
		}
		return &pb.MoveLeaderResponse{Header: s.header(s.committed())}, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.MoveLeaderResponse, error) {
		return pb.NewMaintenanceClient(cc).MoveLeader(ctx, r)
	})
}

// Axon's membership is the instances sharing the engine: they join by
// starting over it and leave by stopping, so etcd's membership changes
// have nothing to do and answer Unimplemented. etcd reserves them for
// root, and refuses anyone else before anything is done; so does Axon.
func (c clusterServer) rootOnly(ctx context.Context, method string) error {
	if err := c.s.authorize(ctx, nil, false, admin); err != nil {
		return toGRPC(err)
	}
	return status.Errorf(codes.Unimplemented, "method %s not implemented", method)
}

func (c clusterServer) MemberAdd(ctx context.Context, _ *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, c.rootOnly(ctx, "MemberAdd")
}

func (c clusterServer) MemberRemove(ctx context.Context, _ *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return nil, c.rootOnly(ctx, "MemberRemove")
}

func (c clusterServer) MemberUpdate(ctx context.Context, _ *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, c.rootOnly(ctx, "MemberUpdate")
}

func (c clusterServer) MemberPromote(ctx context.Context, _ *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, c.rootOnly(ctx, "MemberPromote")
}
