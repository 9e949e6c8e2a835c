package linearizability

import (
	"bytes"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The visualisation shows one line per operation and state: keep them
// short, and show values only as far as they help.
const (
	maxValue     = 24
	maxStateKeys = 40
)

func describeOp(in Input, out Output) string {
	return describeInput(in) + " -> " + describeOutput(out)
}

func describeInput(in Input) string {
	switch {
	case in.KV != nil:
		return describeRequest(in.KV)
	case in.Grant != nil:
		return fmt.Sprintf("grant lease=%d ttl=%d", in.Grant.ID, in.Grant.TTL)
	case in.Revoke != nil:
		return fmt.Sprintf("revoke lease=%d", in.Revoke.ID)
	case in.Compact != nil:
		return fmt.Sprintf("compact @r%d", in.Compact.Revision)
	}
	return "empty"
}

func describeOutput(out Output) string {
	switch {
	case out.unknown:
		return "?"
	case out.Err != "":
		return "err: " + out.Err
	case out.KV != nil:
		return fmt.Sprintf("r%d %s", out.Revision(), describeResponse(out.KV))
	case out.Grant != nil:
		return fmt.Sprintf("r%d lease=%d", out.Revision(), out.Grant.ID)
	case out.Revoke != nil, out.Compact != nil:
		return fmt.Sprintf("r%d ok", out.Revision())
	}
	return "empty"
}

func describeRequest(op *pb.RequestOp) string {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		r := tv.RequestRange
		s := "range " + describeSpan(r.Key, r.RangeEnd)
		if r.Revision != 0 {
			s += fmt.Sprintf(" @r%d", r.Revision)
		}
		return s + describeOptions(r)
	case *pb.RequestOp_RequestPut:
		p := tv.RequestPut
		s := fmt.Sprintf("put %q=%s", p.Key, short(p.Value))
		if p.Lease != 0 {
			s += fmt.Sprintf(" lease=%d", p.Lease)
		}
		if p.PrevKv {
			s += " prev_kv"
		}
		if p.IgnoreValue {
			s += " ignore_value"
		}
		if p.IgnoreLease {
			s += " ignore_lease"
		}
		return s
	case *pb.RequestOp_RequestDeleteRange:
		d := tv.RequestDeleteRange
		s := "delete " + describeSpan(d.Key, d.RangeEnd)
		if d.PrevKv {
			s += " prev_kv"
		}
		return s
	case *pb.RequestOp_RequestTxn:
		t := tv.RequestTxn
		cmps := make([]string, len(t.Compare))
		for i, c := range t.Compare {
			cmps[i] = describeCompare(c)
		}
		return fmt.Sprintf("txn if [%s] then [%s] else [%s]", strings.Join(cmps, ", "), describeRequests(t.Success), describeRequests(t.Failure))
	}
	return "empty"
}

func describeRequests(ops []*pb.RequestOp) string {
	s := make([]string, len(ops))
	for i, op := range ops {
		s[i] = describeRequest(op)
	}
	return strings.Join(s, "; ")
}

func describeCompare(c *pb.Compare) string {
	var v string
	switch c.Target {
	case pb.Compare_VALUE:
		v = short(c.GetValue())
	case pb.Compare_CREATE:
		v = fmt.Sprint(c.GetCreateRevision())
	case pb.Compare_MOD:
		v = fmt.Sprint(c.GetModRevision())
	case pb.Compare_VERSION:
		v = fmt.Sprint(c.GetVersion())
	case pb.Compare_LEASE:
		v = fmt.Sprint(c.GetLease())
	}
	op := map[pb.Compare_CompareResult]string{pb.Compare_EQUAL: "=", pb.Compare_NOT_EQUAL: "!=", pb.Compare_GREATER: ">", pb.Compare_LESS: "<"}[c.Result]
	return fmt.Sprintf("%s(%s)%s%s", strings.ToLower(c.Target.String()), describeSpan(c.Key, c.RangeEnd), op, v)
}

func describeResponse(r *pb.ResponseOp) string {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponseRange:
		g := tv.ResponseRange
		s := fmt.Sprintf("count=%d", g.Count)
		if g.More {
			s += " more"
		}
		return s + " [" + describeKVs(g.Kvs) + "]"
	case *pb.ResponseOp_ResponsePut:
		if p := tv.ResponsePut.PrevKv; p != nil {
			return "prev=" + describeKV(p)
		}
		return "ok"
	case *pb.ResponseOp_ResponseDeleteRange:
		d := tv.ResponseDeleteRange
		s := fmt.Sprintf("deleted=%d", d.Deleted)
		if len(d.PrevKvs) > 0 {
			s += " prev=[" + describeKVs(d.PrevKvs) + "]"
		}
		return s
	case *pb.ResponseOp_ResponseTxn:
		t := tv.ResponseTxn
		branch := "then"
		if !t.Succeeded {
			branch = "else"
		}
		s := make([]string, len(t.Responses))
		for i, r := range t.Responses {
			s[i] = describeResponse(r)
		}
		return branch + " [" + strings.Join(s, "; ") + "]"
	}
	return "empty"
}

func describeKVs(kvs []*mvccpb.KeyValue) string {
	s := make([]string, len(kvs))
	for i, kv := range kvs {
		s[i] = describeKV(kv)
	}
	return strings.Join(s, ", ")
}

func describeKV(kv *mvccpb.KeyValue) string {
	s := fmt.Sprintf("%q=%s c%d m%d v%d", kv.Key, short(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version)
	if kv.Lease != 0 {
		s += fmt.Sprintf(" L%d", kv.Lease)
	}
	return s
}

// describeSpan renders etcd's key range: a key, a prefix, from-key or
// an interval.
func describeSpan(key, end []byte) string {
	switch {
	case len(end) == 0:
		return fmt.Sprintf("%q", key)
	case len(end) == 1 && end[0] == 0:
		return fmt.Sprintf("%q..", key)
	case bytes.Equal(end, prefixEnd(key)):
		return fmt.Sprintf("%q*", key)
	}
	return fmt.Sprintf("%q..%q", key, end)
}

// prefixEnd is the range end that makes [key, end) the prefix key.
func prefixEnd(key []byte) []byte {
	end := bytes.Clone(key)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

func short(v []byte) string {
	if len(v) > maxValue {
		return fmt.Sprintf("%q…(%dB)", v[:maxValue], len(v))
	}
	return fmt.Sprintf("%q", v)
}

func (s *state) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "r%d", s.rev)
	if s.compact != 0 {
		fmt.Fprintf(&b, " compact=r%d", s.compact)
	}
	if len(s.leases) > 0 {
		fmt.Fprintf(&b, " leases=%v", s.leases)
	}
	b.WriteString(" {")
	for i, kv := range s.kvs {
		if i == maxStateKeys {
			fmt.Fprintf(&b, ", …(+%d)", len(s.kvs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(describeKV(kv))
	}
	b.WriteString("}")
	return b.String()
}

// describeOptions renders a range's options beyond its span and
// revision, each with a leading space.
func describeOptions(r *pb.RangeRequest) string {
	var s string
	if r.Limit != 0 {
		s += fmt.Sprintf(" limit=%d", r.Limit)
	}
	if r.SortTarget != pb.RangeRequest_KEY || r.SortOrder != pb.RangeRequest_NONE {
		s += fmt.Sprintf(" sort=%s/%s", r.SortTarget, r.SortOrder)
	}
	if r.CountOnly {
		s += " count_only"
	}
	if r.KeysOnly {
		s += " keys_only"
	}
	for _, f := range []struct {
		name string
		rev  int64
	}{{"min_mod", r.MinModRevision}, {"max_mod", r.MaxModRevision}, {"min_create", r.MinCreateRevision}, {"max_create", r.MaxCreateRevision}} {
		if f.rev != 0 {
			s += fmt.Sprintf(" %s=r%d", f.name, f.rev)
		}
	}
	return s
}
