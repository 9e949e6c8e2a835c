package server_test

import (
	"context"
	"fmt"
	"regexp"
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
