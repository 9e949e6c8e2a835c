package server_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/server"
)

// parityCases send the same requests to Axon and to an embedded etcd 3.7.3
// and compare what comes back, rendered by render. Grow it with every
// difference from etcd found.
var parityCases = []struct {
	name string
	run  func(ctx context.Context, cli *clientv3.Client, p string) (string, error)
}{
	{"a keys-only range drops values and leases", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"a", "v", clientv3.WithLease(l.ID)); err != nil {
			return "", err
		}
		r, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return "", err
		}
		return render(r.Kvs, r.Count, r.More), nil
	}},
	{"a keys-only single-key get drops its lease", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"a", "v", clientv3.WithLease(l.ID)); err != nil {
			return "", err
		}
		r, err := cli.Get(ctx, p+"a", clientv3.WithKeysOnly())
		if err != nil {
			return "", err
		}
		return render(r.Kvs, r.Count, r.More), nil
	}},
	{"a watch from a compacted revision is canceled without a reason", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		var rev int64
		for i := range 3 {
			r, err := cli.Put(ctx, p+"k", strconv.Itoa(i))
			if err != nil {
				return "", err
			}
			rev = r.Header.Revision
		}
		if _, err := cli.Compact(ctx, rev); err != nil {
			return "", err
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wr := <-cli.Watch(wctx, p+"k", clientv3.WithRev(rev-1))
		return fmt.Sprintf("canceled=%v compact revision is the last put's=%v reason=%q err=%v", wr.Canceled, wr.CompactRevision == rev, wr.CancelReason, wr.Err()), nil
	}},
	{"puts, a failed compare and a ranged delete with prev_kv", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		var out []string
		for _, k := range []string{"a", "b", "c"} {
			r, err := cli.Put(ctx, p+k, "1", clientv3.WithPrevKV())
			if err != nil {
				return "", err
			}
			out = append(out, fmt.Sprintf("put %s prev=%v", k, r.PrevKv != nil))
		}
		r, err := cli.Put(ctx, p+"a", "2", clientv3.WithPrevKV())
		if err != nil {
			return "", err
		}
		out = append(out, "put a prev={"+r.PrevKv.String()+"}")
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(p+"a"), "=", "1")).Then(clientv3.OpPut(p+"a", "3")).Else(clientv3.OpGet(p + "b")).Commit()
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("txn succeeded=%v else=%s", tr.Succeeded, render(tr.Responses[0].GetResponseRange().Kvs, 0, false)))
		dr, err := cli.Delete(ctx, p, clientv3.WithPrefix(), clientv3.WithPrevKV())
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("deleted %d prev=%s", dr.Deleted, render(dr.PrevKvs, 0, false)))
		return strings.Join(out, "\n"), nil
	}},
	{"requests that change nothing do not move the revision", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		first, err := cli.Put(ctx, p+"a", "1")
		if err != nil {
			return "", err
		}
		base := first.Header.Revision
		var out []string
		note := func(what string, h *pb.ResponseHeader, err error) {
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", what, err))
				return
			}
			out = append(out, fmt.Sprintf("%s: revision %+d", what, h.Revision-base))
		}
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(p+"a"), "=", base+100)).Then(clientv3.OpPut(p+"a", "2")).Else(clientv3.OpGet(p + "a")).Commit()
		if err == nil {
			note(fmt.Sprintf("failed compare (succeeded=%v, else range at %+d)", tr.Succeeded, tr.Responses[0].GetResponseRange().Header.GetRevision()-base), tr.Header, nil)
		} else {
			note("failed compare", nil, err)
		}
		cr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(p+"a"), "=", 0)).Then(clientv3.OpPut(p+"a", "2")).Commit()
		note(fmt.Sprintf("create of an existing key (succeeded=%v)", cr != nil && cr.Succeeded), header(cr), err)
		dr, err := cli.Delete(ctx, p+"missing")
		note(fmt.Sprintf("delete of a missing key (deleted=%d)", deleted(dr)), headerOf(dr), err)
		dr, err = cli.Delete(ctx, p+"none/", clientv3.WithPrefix())
		note(fmt.Sprintf("ranged delete of nothing (deleted=%d)", deleted(dr)), headerOf(dr), err)
		_, err = cli.Put(ctx, p+"missing", "", clientv3.WithIgnoreValue())
		note("put with ignore_value of a missing key", nil, err)
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		note("lease grant", g.ResponseHeader, nil)
		rv, err := cli.Revoke(ctx, g.ID)
		if err != nil {
			return "", err
		}
		note("revoke of a lease without keys", rv.Header, nil)
		r, err := cli.Put(ctx, p+"b", "1")
		note("the next put", headerOfPut(r), err)
		return strings.Join(out, "\n"), nil
	}},
	{"leases a client names: its ID honoured, a second grant of it, a TTL too large, a revoke of none, time-to-live with keys", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		var out []string
		note := func(what string, err error) { out = append(out, fmt.Sprintf("%s: err=%v", what, err)) }
		id := clientv3.LeaseID(7_000_000_000 + int64(len(p))*1000 + int64(p[len(p)-2]))
		g, err := cli.Lease.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		mine, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(id), TTL: 30})
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("grant of a chosen ID: honoured=%v ttl=%d", mine.ID == int64(id), mine.TTL))
		_, err = pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(id), TTL: 30})
		note("a second grant of it", err)
		_, err = cli.Lease.Grant(ctx, core.MaxLeaseTTL+1)
		note("a grant above the largest TTL", err)
		neg, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: -int64(id), TTL: 30})
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("grant of a negative ID: honoured=%v", neg.ID == -int64(id)))
		if _, err := cli.Put(ctx, p+"neg", "1", clientv3.WithLease(-id)); err != nil {
			return "", err
		}
		nt, err := cli.TimeToLive(ctx, -id, clientv3.WithAttachedKeys())
		if err != nil {
			return "", err
		}
		nl, err := cli.Leases(ctx)
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("its time-to-live: granted=%d keys=%q; listed=%v", nt.GrantedTTL, nt.Keys, slices.ContainsFunc(nl.Leases, func(l clientv3.LeaseStatus) bool { return l.ID == -id })))
		if _, err := cli.Revoke(ctx, -id); err != nil {
			return "", err
		}
		ng, err := cli.Get(ctx, p+"neg")
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("its revoke deleted its key: %v", len(ng.Kvs) == 0))
		_, err = cli.Revoke(ctx, id+1)
		note("a revoke of a lease never granted", err)
		if _, err := cli.Put(ctx, p+"a", "1", clientv3.WithLease(id)); err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"b", "1", clientv3.WithLease(id)); err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"b", "2", clientv3.WithLease(g.ID)); err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"c", "1", clientv3.WithLease(id)); err != nil {
			return "", err
		}
		if _, err := cli.Delete(ctx, p+"c"); err != nil {
			return "", err
		}
		ttl, err := cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("time-to-live: granted=%d ttl in (20,30]=%v keys=%q", ttl.GrantedTTL, ttl.TTL > 20 && ttl.TTL <= 30, ttl.Keys))
		if _, err := cli.Revoke(ctx, id); err != nil {
			return "", err
		}
		_, err = cli.Revoke(ctx, id)
		note("a second revoke", err)
		ttl, err = cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("time-to-live once revoked: ttl=%d granted=%d keys=%q", ttl.TTL, ttl.GrantedTTL, ttl.Keys))
		again, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(id), TTL: 5})
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("a grant of the revoked ID: honoured=%v ttl=%d", again.ID == int64(id), again.TTL))
		ls, err := cli.Leases(ctx)
		if err != nil {
			return "", err
		}
		listed := 0
		for _, l := range ls.Leases {
			if l.ID == id || l.ID == g.ID {
				listed++
			}
		}
		out = append(out, fmt.Sprintf("leases lists both: %v", listed == 2))
		return strings.Join(out, "\n"), nil
	}},
	{"a prev_kv watcher gets each event's previous version, from the ring and beyond it", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		withPrev := cli.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithPrevKV())
		plain := cli.Watch(wctx, p, clientv3.WithPrefix())
		var last int64
		put := func(k, v string, opts ...clientv3.OpOption) error {
			r, err := cli.Put(ctx, p+k, v, opts...)
			if err == nil {
				last = r.Header.Revision
			}
			return err
		}
		// More keys than the ring holds events (64 here), updated in
		// rounds: a previous version is then out of the ring; the same
		// key put twice in a row finds it in the ring.
		for round := range 3 {
			for k := range 80 {
				if err := put(fmt.Sprintf("k%02d", k), fmt.Sprintf("r%d", round)); err != nil {
					return "", err
				}
			}
		}
		for _, v := range []string{"x", "y"} {
			if err := put("hot", v); err != nil {
				return "", err
			}
		}
		if err := put("k00", "", clientv3.WithIgnoreValue()); err != nil {
			return "", err
		}
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(p+"k01"), ">", 0)).Then(clientv3.OpPut(p+"k01", "cas")).Else(clientv3.OpGet(p + "k01")).Commit()
		if err != nil {
			return "", err
		}
		last = tr.Header.Revision
		dr, err := cli.Delete(ctx, p+"k1", clientv3.WithPrefix())
		if err != nil {
			return "", err
		}
		last = dr.Header.Revision
		var out []string
		for _, ch := range []clientv3.WatchChan{withPrev, plain} {
			var n int
			for seen := int64(0); seen < last; {
				wr, ok := <-ch
				if !ok {
					return "", fmt.Errorf("watch closed at %d of %d", seen, last)
				}
				if err := wr.Err(); err != nil {
					return "", err
				}
				for _, ev := range wr.Events {
					n++
					seen = ev.Kv.ModRevision
					out = append(out, fmt.Sprintf("%s {%s} prev {%s}", ev.Type, ev.Kv, ev.PrevKv))
				}
			}
			out = append(out, fmt.Sprintf("%d events", n))
		}
		return strings.Join(out, "\n"), nil
	}},
	{"a range stream: its chunks, limits, keys only, count only, one key, none, an old revision, and revision errors", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		var first, last int64
		for i := range 30 {
			r, err := cli.Put(ctx, fmt.Sprintf("%sk%02d", p, i), strings.Repeat("v", i))
			if err != nil {
				return "", err
			}
			if first == 0 {
				first = r.Header.Revision
			}
		}
		for _, k := range []string{"k07", "k21"} {
			r, err := cli.Delete(ctx, p+k)
			if err != nil {
				return "", err
			}
			last = r.Header.Revision
		}
		var out []string
		stream := func(name, key string, opts ...clientv3.OpOption) error {
			ch, err := cli.GetStream(ctx, key, opts...)
			if err != nil {
				return err
			}
			var chunks []string
			merged := &pb.RangeResponse{}
			for r := range ch {
				if err := r.Err(); err != nil {
					out = append(out, fmt.Sprintf("%s: %v", name, err))
					return nil
				}
				c := r.RangeResponse
				chunks = append(chunks, fmt.Sprintf("[%d kvs, header %v, count %d, more %v]", len(c.Kvs), c.Header != nil, c.Count, c.More))
				proto.Merge(merged, c)
			}
			out = append(out, fmt.Sprintf("%s: %s at the last write %v: %s", name, strings.Join(chunks, " "),
				merged.Header.GetRevision() == last, render(merged.Kvs, merged.Count, merged.More)))
			return nil
		}
		all := clientv3.WithRange(p + "l")
		for _, c := range []struct {
			name, key string
			opts      []clientv3.OpOption
		}{
			{"prefix", p, []clientv3.OpOption{all}},
			{"limit 10", p, []clientv3.OpOption{all, clientv3.WithLimit(10)}},
			{"limit 12", p, []clientv3.OpOption{all, clientv3.WithLimit(12)}},
			{"limit 28, every key", p, []clientv3.OpOption{all, clientv3.WithLimit(28)}},
			{"keys only", p, []clientv3.OpOption{all, clientv3.WithKeysOnly()}},
			{"count only", p, []clientv3.OpOption{all, clientv3.WithCountOnly()}},
			{"one key", p + "k03", nil},
			{"a range of none", p + "none/", []clientv3.OpOption{clientv3.WithPrefix()}},
			{"at the first put", p, []clientv3.OpOption{all, clientv3.WithRev(first)}},
			{"at a future revision", p, []clientv3.OpOption{all, clientv3.WithRev(last + 100)}},
		} {
			if err := stream(c.name, c.key, c.opts...); err != nil {
				return "", err
			}
		}
		if _, err := cli.Compact(ctx, first+1); err != nil {
			return "", err
		}
		if err := stream("at a compacted revision", p, all, clientv3.WithRev(first)); err != nil {
			return "", err
		}
		return strings.Join(out, "\n"), nil
	}},
	{"requests at and past the rules of etcd's gRPC layer", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		if _, err := cli.Put(ctx, p+"a", "1"); err != nil {
			return "", err
		}
		var out []string
		for i, op := range invalidParity(p) {
			out = append(out, fmt.Sprintf("%d: %s", i, doRaw(ctx, cli, op)))
		}
		return strings.Join(out, "\n"), nil
	}},
	{"NOSPACE refuses puts, txns with a put in any branch and lease grants, not deletes, reads or revokes", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"a", "1"); err != nil {
			return "", err
		}
		mc := pb.NewMaintenanceClient(cli.ActiveConnection())
		alarm := func(action pb.AlarmRequest_AlarmAction) error {
			_, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: 7, Alarm: pb.AlarmType_NOSPACE})
			return err
		}
		if err := alarm(pb.AlarmRequest_ACTIVATE); err != nil {
			return "", err
		}
		put := func(k string) *pb.RequestOp {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(p + k), Value: []byte("v")}}}
		}
		get := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(p + "a")}}}
		txn := func(then, els []*pb.RequestOp) *pb.RequestOp {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
		}
		var out []string
		for _, op := range []*pb.RequestOp{
			put("b"),
			txn([]*pb.RequestOp{get}, []*pb.RequestOp{put("b")}),
			txn([]*pb.RequestOp{txn(nil, []*pb.RequestOp{put("b")})}, nil),
			txn([]*pb.RequestOp{get}, []*pb.RequestOp{get}),
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(p + "a")}}},
		} {
			out = append(out, doRaw(ctx, cli, op))
		}
		_, err = cli.Grant(ctx, 60)
		out = append(out, fmt.Sprintf("grant: %v", err))
		_, err = cli.Revoke(ctx, l.ID)
		out = append(out, fmt.Sprintf("revoke: %v", err))
		if err := alarm(pb.AlarmRequest_DEACTIVATE); err != nil {
			return "", err
		}
		out = append(out, "disarmed: "+doRaw(ctx, cli, put("b")))
		return strings.Join(out, "\n"), nil
	}},
	{"compares over a range and on leases, and a txn's ranges at revisions", func(ctx context.Context, cli *clientv3.Client, p string) (string, error) {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			return "", err
		}
		first, err := cli.Put(ctx, p+"a", "1", clientv3.WithLease(l.ID))
		if err != nil {
			return "", err
		}
		if _, err := cli.Put(ctx, p+"b", "2"); err != nil {
			return "", err
		}
		last, err := cli.Put(ctx, p+"a", "3", clientv3.WithLease(l.ID))
		if err != nil {
			return "", err
		}
		var out []string
		txn := func(name string, cmps []clientv3.Cmp, then ...clientv3.Op) {
			r, err := cli.Txn(ctx).If(cmps...).Then(then...).Commit()
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", name, err))
				return
			}
			s := fmt.Sprintf("%s: succeeded=%v", name, r.Succeeded)
			for _, op := range r.Responses {
				if rr := op.GetResponseRange(); rr != nil {
					s += " " + render(rr.Kvs, rr.Count, rr.More)
				}
			}
			out = append(out, s)
		}
		ranged := func(c clientv3.Cmp, end string) clientv3.Cmp { return c.WithRange(end) }
		txn("version over the range, every key above 0", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Version(p), ">", 0), p+"z")})
		txn("version over the range, the first key only above 1", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Version(p+"a"), ">", 1), p+"z")})
		txn("value over the range, the last key differs", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Value(p+"a"), "=", "3"), p+"z")})
		txn("mod revision below the last put over the range", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.ModRevision(p+"a"), "<", last.Header.Revision), p+"z")})
		txn("version 0 over a range of no key", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Version(p+"x"), "=", 0), p+"z")})
		txn("value over a range of no key", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Value(p+"x"), "=", ""), p+"z")})
		txn("version over a range whose end is below its key", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.Version(p+"z"), "=", 0), p+"a")})
		txn("create revision over every key from the prefix on", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.CreateRevision(p), ">", first.Header.Revision-1), "\x00")})
		txn("lease of a leased key", []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(p+"a"), "=", l.ID)})
		txn("lease of an unleased key", []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(p+"b"), "=", clientv3.NoLease)})
		txn("lease of a missing key", []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(p+"x"), "=", 0)})
		txn("lease over the range", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.LeaseValue(p+"a"), "=", l.ID), p+"z")})
		txn("lease over the range, above none", []clientv3.Cmp{ranged(clientv3.Compare(clientv3.LeaseValue(p+"a"), ">", 0), p+"c")})
		all := clientv3.WithRange(p + "z")
		txn("a range at the first put after a put in the txn", nil, clientv3.OpPut(p+"b", "4"), clientv3.OpGet(p, all, clientv3.WithRev(first.Header.Revision)), clientv3.OpGet(p, all))
		txn("a read-only range at the last revision", nil, clientv3.OpGet(p, all, clientv3.WithRev(last.Header.Revision+1)))
		now, err := cli.Get(ctx, p+"a")
		if err != nil {
			return "", err
		}
		txn("a range at the txn's own revision", nil, clientv3.OpPut(p+"c", "5"), clientv3.OpGet(p, all, clientv3.WithRev(now.Header.Revision+1)))
		txn("a range at a future revision on the branch not taken", []clientv3.Cmp{clientv3.Compare(clientv3.Version(p+"a"), "=", 0)}, clientv3.OpGet(p, all, clientv3.WithRev(now.Header.Revision+100)))
		txn("a nested txn's range at a future revision", nil, clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet(p, all, clientv3.WithRev(now.Header.Revision+100))}, nil))
		if _, err := cli.Compact(ctx, last.Header.Revision); err != nil {
			return "", err
		}
		txn("a range at a compacted revision", nil, clientv3.OpPut(p+"c", "6"), clientv3.OpGet(p, all, clientv3.WithRev(first.Header.Revision)))
		txn("a range at the compact revision", nil, clientv3.OpGet(p, all, clientv3.WithRev(last.Header.Revision)))
		return strings.Join(out, "\n"), nil
	}},
}

func header(r *clientv3.TxnResponse) *pb.ResponseHeader {
	if r == nil {
		return nil
	}
	return r.Header
}

func headerOf(r *clientv3.DeleteResponse) *pb.ResponseHeader {
	if r == nil {
		return nil
	}
	return r.Header
}

func headerOfPut(r *clientv3.PutResponse) *pb.ResponseHeader {
	if r == nil {
		return nil
	}
	return r.Header
}

func deleted(r *clientv3.DeleteResponse) int64 {
	if r == nil {
		return -1
	}
	return r.Deleted
}

// invalidParity are requests at and past the rules of etcd's gRPC layer
// that the simulator's etcd clients send (sim/alarm.go invalidRequest),
// each keyed under p.
func invalidParity(p string) []*pb.RequestOp {
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(p + k), Value: []byte("v")}}}
	}
	get := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(p + k)}}}
	}
	del := func(k, end string) *pb.RequestOp {
		d := &pb.DeleteRangeRequest{Key: []byte(p + k)}
		if end != "" {
			d.RangeEnd = []byte(p + end)
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
	}
	txn := func(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}}}
	}
	cmp := func(k string) *pb.Compare {
		return &pb.Compare{Key: []byte(p + k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}
	}
	n := func(count int, f func(i int) *pb.RequestOp) []*pb.RequestOp {
		var ops []*pb.RequestOp
		for i := range count {
			ops = append(ops, f(i))
		}
		return ops
	}
	cmps := func(count int) []*pb.Compare {
		var out []*pb.Compare
		for range count {
			out = append(out, cmp("a"))
		}
		return out
	}
	emptyKey := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Value: []byte("v")}}}
	valueProvided := put("a")
	valueProvided.GetRequestPut().IgnoreValue = true
	leaseProvided := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(p + "a"), IgnoreLease: true, Lease: 7}}}
	emptyDelete := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{}}}
	getEmpty := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{}}}
	nested := func(count int) *pb.RequestOp {
		return txn(cmps(2), []*pb.RequestOp{txn(nil, n(count, func(int) *pb.RequestOp { return get("a") }), nil)}, nil)
	}
	return []*pb.RequestOp{
		emptyKey, valueProvided, leaseProvided, emptyDelete,
		txn([]*pb.Compare{{Target: pb.Compare_MOD, Result: pb.Compare_EQUAL}}, []*pb.RequestOp{put("a")}, nil),
		txn(nil, []*pb.RequestOp{put("a"), getEmpty}, nil),
		txn(nil, []*pb.RequestOp{put("a"), get("a"), put("a")}, nil),
		txn(cmps(1), []*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a")}),
		txn(nil, []*pb.RequestOp{del("a", "c"), put("b")}, nil),
		txn(nil, []*pb.RequestOp{del("a", "b"), put("b")}, nil),
		txn(nil, []*pb.RequestOp{txn(cmps(1), []*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a")})}, nil),
		txn(nil, []*pb.RequestOp{txn(cmps(1), []*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a")}), put("a")}, nil),
		txn(cmps(128), []*pb.RequestOp{put("a")}, nil),
		txn(cmps(129), []*pb.RequestOp{put("a")}, nil),
		txn(nil, n(128, func(i int) *pb.RequestOp { return del(fmt.Sprintf("many/%d", i), "") }), nil),
		txn(nil, n(129, func(i int) *pb.RequestOp { return del(fmt.Sprintf("many/%d", i), "") }), nil),
		nested(126), nested(127),
		txn(nil, []*pb.RequestOp{get("a"), {}}, nil),
	}
}

// doRaw sends op as its own gRPC call and renders the answer's shape or
// the error.
func doRaw(ctx context.Context, cli *clientv3.Client, op *pb.RequestOp) string {
	kv := pb.NewKVClient(cli.ActiveConnection())
	var err error
	what := "ok"
	switch tv := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		_, err = kv.Put(ctx, tv.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		_, err = kv.DeleteRange(ctx, tv.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		var r *pb.TxnResponse
		if r, err = kv.Txn(ctx, tv.RequestTxn); err == nil {
			what = fmt.Sprintf("succeeded=%v responses=%d", r.Succeeded, len(r.Responses))
		}
	}
	if err != nil {
		return err.Error()
	}
	return what
}

// TestParityWithEtcd runs parityCases against both systems. Revisions
// are compared by their order, not their values: the two stores start
// from different histories (a case that cares compares differences).
func TestParityWithEtcd(t *testing.T) {
	_, axon := startServer(t, server.Config{Core: core.Config{RingSize: 64}})
	etcd := startEtcd(t)
	for i, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			p := fmt.Sprintf("/parity/%d/", i)
			want, err := tc.run(ctx, etcd, p)
			if err != nil {
				t.Fatalf("etcd: %v", err)
			}
			got, err := tc.run(ctx, axon, p)
			if err != nil {
				t.Fatalf("axon: %v", err)
			}
			if got, want := ranked(got), ranked(want); got != want {
				t.Errorf("axon:\n%s\netcd:\n%s", got, want)
			}
		})
	}
}

var revField = regexp.MustCompile(`(create_revision|mod_revision|lease):(\d+)`)

// ranked replaces each revision and lease ID by its rank of appearance.
func ranked(s string) string {
	seen := map[string]int{}
	return revField.ReplaceAllStringFunc(s, func(m string) string {
		f := strings.SplitN(m, ":", 2)
		key := "r" + f[1] // a revision, or a lease ID
		if f[0] == "lease" {
			key = "l" + f[1]
		}
		if _, ok := seen[key]; !ok {
			seen[key] = len(seen) + 1
		}
		return fmt.Sprintf("%s:#%d", f[0], seen[key])
	})
}

// render prints key-values in a stable form.
func render[KV interface{ String() string }](kvs []KV, count int64, more bool) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = "{" + kv.String() + "}"
	}
	return fmt.Sprintf("count=%d more=%v %s", count, more, strings.Join(parts, " "))
}

// startEtcd starts an embedded etcd 3.7.3 and dials it.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	u := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u.Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
