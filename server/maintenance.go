package server

import (
	"context"
	"slices"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Version is the etcd version Axon reports: at least 3.5.13, so the
// Kubernetes apiserver enables RequestWatchProgress.
const Version = "3.6.0"

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

func (m maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := m.s.authorize(ctx, nil, false, someUser); err != nil {
		return nil, toGRPC(err)
	}
	c := m.s.committed()
	term := m.s.drv.Status().Term
	// etcdctl divides by the db size: never report 0.
	used, err := m.s.space.used()
	failed := m.s.engineFailed()
	if err != nil && failed == nil {
		return nil, toGRPC(err)
	}
	size := max(used, 1)
	inUse := size
	if iu, ok := m.s.eng.(storage.InUser); ok && err == nil {
		inUse = max(min(iu.InUse(), size), 1)
	}
	var errs []string
	if failed != nil {
		errs = append(errs, failed.Error())
	}
	if on, err := m.s.noSpace(ctx); err != nil {
		return nil, toGRPC(err)
	} else if on {
		errs = append(errs, (&pb.AlarmMember{MemberID: m.s.cfg.MemberID, Alarm: pb.AlarmType_NOSPACE}).String())
	}
	return &pb.StatusResponse{
		DbSize: size, DbSizeInUse: inUse, DbSizeQuota: max(m.s.space.quota(), 0), Errors: errs, DowngradeInfo: &pb.DowngradeInfo{},
		Header: m.s.header(c), Version: Version, Leader: m.s.leaderID(ctx),
		RaftIndex: uint64(c), RaftTerm: uint64(max(term, 1)), RaftAppliedIndex: uint64(c), StorageVersion: "3.6.0",
	}, nil
}

// Defragment gives back disk space, as etcd's does for its member: after
// a compaction, this is what shrinks the data below the quota so that the
// NOSPACE alarm can be disarmed. Service goes on meanwhile.
func (m maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.authorize(ctx, nil, false, admin); err != nil {
		return nil, toGRPC(err)
	}
	if d, ok := m.s.eng.(storage.Defragmenter); ok {
		start := time.Now()
		before, _ := m.s.space.used()
		m.s.metrics.etcd.defragging.Set(1)
		// As etcd's, a defragmentation once begun runs to its end (or the
		// server's): etcdctl gives up after its 5 s command timeout, and
		// a client that stops waiting must not cut it short.
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(m.s.ctx, cancel)
		err := d.Defrag(dctx)
		stop()
		cancel()
		m.s.metrics.etcd.defragging.Set(0)
		m.s.metrics.etcd.defrag.Observe(time.Since(start).Seconds())
		if err != nil {
			m.s.log.Warn("defragment", "err", err)
			return nil, m.s.defragError(err)
		}
		after, _ := m.s.space.used()
		m.s.log.Info("defragmented", "took", time.Since(start), "bytes_before", before, "bytes_after", after)
	}
	return &pb.DefragmentResponse{Header: m.s.header(0)}, nil
}

// Alarm lists, raises and disarms alarms. Axon has one, NOSPACE, kept in
// the engine per member as etcd keys it: by the member ID the request
// names, 0 included. One raised by a binary that kept no members, or by
// this one's quota, is listed under the answering instance's ID.
func (m maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	check := admin
	if r.Action == pb.AlarmRequest_GET {
		check = someUser
	}
	if err := m.s.authorize(ctx, nil, false, check); err != nil {
		return nil, toGRPC(err)
	}
	if r.Action == pb.AlarmRequest_GET {
		alarms, err := m.s.Alarms(ctx)
		if err != nil {
			return nil, err
		}
		resp := &pb.AlarmResponse{Header: m.s.header(m.s.committed())}
		for _, a := range alarms {
			if r.Alarm == pb.AlarmType_NONE || r.Alarm == a.Alarm {
				resp.Alarms = append(resp.Alarms, a)
			}
		}
		return resp, nil
	}
	if r.Alarm != pb.AlarmType_NOSPACE {
		// CORRUPT is raised by etcd's own consistency checks; Axon has
		// none that would, and a NONE alarm changes nothing.
		return &pb.AlarmResponse{Header: m.s.header(m.s.committed())}, nil
	}
	raise := r.Action == pb.AlarmRequest_ACTIVATE
	return forward(m.s, ctx, func() (*pb.AlarmResponse, error) {
		before, led := m.s.drv.Alarmed()
		if !led {
			return nil, core.ErrNotLeader
		}
		resp, err := m.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return m.s.drv.SetAlarm(r.MemberID, raise, answer) })
		if err != nil {
			return nil, err
		}
		if !raise {
			// Measure again at the next write: still over, raise again.
			m.s.space.next.Store(0)
		}
		out := &pb.AlarmResponse{Header: m.s.header(resp.Rev)}
		if raise || slices.Contains(m.s.alarmMembers(before), r.MemberID) {
			out.Alarms = []*pb.AlarmMember{{MemberID: r.MemberID, Alarm: pb.AlarmType_NOSPACE}}
		}
		return out, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.AlarmResponse, error) {
		return pb.NewMaintenanceClient(cc).Alarm(ctx, r)
	})
}

// Alarms lists the raised alarms as Alarm GET does, read by the
// instance itself (no caller to authorize), for its health checks.
func (s *Server) Alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	ids, err := s.alarmed(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	out := make([]*pb.AlarmMember, 0, len(ids))
	for _, id := range ids {
		out = append(out, &pb.AlarmMember{MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	}
	return out, nil
}

// HasLeader reports whether this instance knows a leader (etcd's health
// answers RAFT NO LEADER without one).
func (s *Server) HasLeader(ctx context.Context) bool { return s.leaderID(ctx) != 0 }

// alarmed returns the member IDs of the raised NOSPACE alarms: the
// leader knows them, other instances read them from the engine.
func (s *Server) alarmed(ctx context.Context) ([]uint64, error) {
	ids, led := s.drv.Alarmed()
	if led {
		return s.alarmMembers(ids), nil
	}
	txn, err := s.eng.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer txn.Rollback()
	ids, err = core.ReadAlarmed(storage.NewReader(txn))
	return s.alarmMembers(ids), err
}

// alarmMembers lists the members of alarms as etcd would: AnyMember's
// under this instance's ID, each once, in order.
func (s *Server) alarmMembers(ids []uint64) []uint64 {
	out := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if id == core.AnyMember {
			id = s.cfg.MemberID
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// noSpace reports whether the NOSPACE alarm is raised: the leader knows,
// other instances read it from the engine.
func (s *Server) noSpace(ctx context.Context) (bool, error) {
	if on, led := s.drv.NoSpace(); led {
		return on, nil
	}
	txn, err := s.eng.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer txn.Rollback()
	return core.ReadNoSpace(storage.NewReader(txn))
}

// HashKV hashes the history up to a revision, for consistency checks.
func (m maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	if err := m.s.authorize(ctx, nil, false, admin); err != nil {
		return nil, toGRPC(err)
	}
	txn, c, compacted, err := m.s.snapshot(ctx, false)
	if err != nil {
		return nil, toGRPC(err)
	}
	defer txn.Rollback()
	rev, header, err := core.CheckRevision(r.Revision, c, compacted)
	if err != nil {
		return nil, toGRPC(err)
	}
	h, err := core.HashKV(storage.NewReader(txn), rev)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.HashKVResponse{Header: m.s.header(header), Hash: h, CompactRevision: compacted, HashRevision: rev}, nil
}

// Hash hashes the store at the commit point, for consistency checks as
// etcd's Hash: etcd hashes its whole backend file, which no other store
// can reproduce; Axon hashes what HashKV at the commit point covers
// (every version of every key, with its value, create revision, version
// and lease). Every instance over one engine answers the same at one
// revision; a diverged or damaged copy does not.
func (m maintenanceServer) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	kv, err := m.HashKV(ctx, &pb.HashKVRequest{})
	if err != nil {
		return nil, err
	}
	return &pb.HashResponse{Header: kv.Header, Hash: kv.Hash}, nil
}

// MoveLeader hands leadership to another instance (etcdctl move-leader).
func (m maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := m.s.authorize(ctx, nil, false, admin); err != nil {
		return nil, toGRPC(err)
	}
	return m.s.moveLeader(ctx, r)
}

// Register adds Axon's etcd services, the peer service other instances
// call, and gRPC health to g, and creates their gRPC series, so that
// every method and code reads 0 before its first call rather than being
// absent (as etcd does).
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, kvServer{s: s})
	pb.RegisterWatchServer(g, watchServer{s: s})
	pb.RegisterMaintenanceServer(g, maintenanceServer{s: s})
	pb.RegisterClusterServer(g, clusterServer{s: s})
	pb.RegisterLeaseServer(g, leaseServer{s: s})
	pb.RegisterAuthServer(g, authServer{s: s})
	g.RegisterService(&peerServiceDesc, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	s.metrics.grpc.InitializeMetrics(g)
}

// Downgrade is etcd's cluster downgrade, which Axon has no use for (each
// instance reads the data format it was built for; see `axon serve
// --upgrade-data`): Unimplemented, after the root check etcd makes first.
func (m maintenanceServer) Downgrade(ctx context.Context, _ *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	if err := m.s.authorize(ctx, nil, false, admin); err != nil {
		return nil, toGRPC(err)
	}
	return nil, status.Errorf(codes.Unimplemented, "method Downgrade not implemented")
}
