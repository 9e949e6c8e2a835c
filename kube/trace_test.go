package kube

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// requestTrace remembers, for the write requests an Axon instance
// answers, the revision in the answer's header, so that a revision that
// holds no write can be traced to the request that took it. (Axon deals
// a revision to every write request; a response's header carries the
// commit point when it was released, which is that revision unless
// writes ran concurrently.)
type requestTrace struct {
	mu    sync.Mutex
	byRev map[int64][]string
}

func newRequestTrace() *requestTrace { return &requestTrace{byRev: map[int64][]string{}} }

// option returns the server option that feeds the trace.
func (tr *requestTrace) option() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if err != nil {
			return resp, err
		}
		what, rev := describeWrite(req, resp)
		if what != "" && rev > 0 {
			tr.mu.Lock()
			// A follower's answer and the leader's to the forwarded
			// call are one request.
			if !slices.Contains(tr.byRev[rev], what) {
				tr.byRev[rev] = append(tr.byRev[rev], what)
			}
			tr.mu.Unlock()
		}
		return resp, err
	})
}

// describeWrite names a write request and its outcome in a few words.
func describeWrite(req, resp any) (string, int64) {
	switch r := req.(type) {
	case *pb.TxnRequest:
		out := resp.(*pb.TxnResponse)
		key := ""
		if len(r.Compare) > 0 {
			key = " on " + string(r.Compare[0].Key)
		}
		ops := r.Success
		if !out.Succeeded {
			ops = r.Failure
		}
		kinds := map[string]bool{}
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil:
				kinds["put"] = true
			case op.GetRequestDeleteRange() != nil:
				kinds["delete"] = true
			case op.GetRequestRange() != nil:
				kinds["range"] = true
			default:
				kinds["txn"] = true
			}
		}
		var ks []string
		for k := range kinds {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		outcome := "compare succeeded"
		if !out.Succeeded {
			outcome = "compare failed"
		}
		ran := "ran nothing"
		if len(ks) > 0 {
			ran = "ran " + strings.Join(ks, " ")
		}
		return fmt.Sprintf("Txn%s, %s, %s", key, outcome, ran), out.GetHeader().GetRevision()
	case *pb.PutRequest:
		return "Put " + string(r.Key), resp.(*pb.PutResponse).GetHeader().GetRevision()
	case *pb.DeleteRangeRequest:
		out := resp.(*pb.DeleteRangeResponse)
		return fmt.Sprintf("DeleteRange %s, deleted %d", r.Key, out.Deleted), out.GetHeader().GetRevision()
	case *pb.LeaseGrantRequest:
		out := resp.(*pb.LeaseGrantResponse)
		return fmt.Sprintf("LeaseGrant TTL %d", r.TTL), out.GetHeader().GetRevision()
	case *pb.LeaseRevokeRequest:
		return "LeaseRevoke", resp.(*pb.LeaseRevokeResponse).GetHeader().GetRevision()
	case *pb.CompactionRequest:
		return fmt.Sprintf("Compact %d", r.Revision), resp.(*pb.CompactionResponse).GetHeader().GetRevision()
	}
	return "", 0
}

// untraced names a revision no traced answer carries: a lease expiry
// (Axon deals one even to a lease that has no keys left), or a request
// answered when the commit point had moved on.
const untraced = "no traced request (lease expiry?)"

// notTraced names a revision of a store whose instances run in processes
// of their own, which the trace cannot see into.
const notTraced = "not traced (Axon runs in other processes)"

// at returns what took revision rev, or "".
func (tr *requestTrace) at(rev int64) string {
	if tr == nil {
		return ""
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.byRev[rev], " | ")
}

// explain renders revisions with the requests that took them, and counts
// the requests by kind. A nil trace (a store it cannot see) explains none.
func (tr *requestTrace) explain(revs []int64) (each []string, kinds map[string]int) {
	kinds = map[string]int{}
	for _, r := range revs {
		what := tr.at(r)
		switch {
		case tr == nil:
			what = notTraced
		case what == "":
			what = untraced
		}
		each = append(each, fmt.Sprintf("%d: %s", r, what))
		kinds[kindOf(what)]++
	}
	return each, kinds
}

// kindOf drops keys from a request's description.
func kindOf(what string) string {
	if strings.HasPrefix(what, "Txn on ") {
		_, rest, _ := strings.Cut(what, ", ")
		return "Txn, " + rest
	}
	if strings.HasPrefix(what, "DeleteRange ") {
		_, rest, _ := strings.Cut(what, ", ")
		return "DeleteRange, " + rest
	}
	return what
}
