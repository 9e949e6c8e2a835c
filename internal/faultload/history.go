package faultload

import (
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
)

// History is a recorded history (Rec) and the write calls in it, which
// Resolve settles against the engine's events once the load is over.
type History struct {
	Rec linearizability.Recorder

	mu      sync.Mutex
	writes  []*Write
	extra   []int64 // revisions of the test's own plain writes
	applied int     // uncertain writes the engine shows applied
	dropped int     // uncertain writes it shows not applied
}

// AddWrite records a write call once it has returned.
func (h *History) AddWrite(w *Write) {
	h.mu.Lock()
	h.writes = append(h.writes, w)
	h.mu.Unlock()
}

// Writes are the write calls recorded so far.
func (h *History) Writes() []*Write {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Write(nil), h.writes...)
}

// Uncertain says how many writes that failed at the client Resolve found
// applied, and how many not.
func (h *History) Uncertain() (applied, dropped int) { return h.applied, h.dropped }

// Resolve settles every write that failed at the client from the
// engine's events (each put's value is unique; a delete is known by the
// mod revision it compared), and checks that every applied revision is
// explained by exactly one call and every acknowledged write applied.
func (h *History) Resolve(evs []core.Event) error {
	byRev := map[int64][]core.Event{}
	byValue := map[string]core.Event{}
	for _, ev := range evs {
		byRev[ev.Rev] = append(byRev[ev.Rev], ev)
		if ev.Type == mvccpb.PUT {
			v := string(ev.Kv.Value)
			if prev, ok := byValue[v]; ok {
				return fmt.Errorf("value %q applied twice: r%d and r%d", v, prev.Rev, ev.Rev)
			}
			byValue[v] = ev
		}
	}
	claimed := map[int64]string{}
	claim := func(rev int64, who string) error {
		if prev, ok := claimed[rev]; ok {
			return fmt.Errorf("revision r%d claimed by %s and %s", rev, prev, who)
		}
		claimed[rev] = who
		return nil
	}
	// The test's own writes and acknowledged writes first.
	for _, rev := range h.extra {
		if err := claim(rev, "a write of the test"); err != nil {
			return err
		}
	}
	for _, w := range h.writes {
		if !w.Acked || !w.Resp.Succeeded {
			continue
		}
		rev := w.Resp.Header.Revision
		if err := claim(rev, w.Describe()); err != nil {
			return err
		}
		if !w.appliedAt(byRev[rev]) {
			return fmt.Errorf("lost write: %s acknowledged at r%d, engine has %v", w.Describe(), rev, DescribeEvents(byRev[rev]))
		}
	}
	patch := func(w *Write, rev int64) error {
		if err := claim(rev, w.Describe()+" (uncertain)"); err != nil {
			return err
		}
		hd := &pb.ResponseHeader{Revision: rev}
		sub := &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: hd}}}
		if w.Kind == Remove {
			sub = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{Header: hd, Deleted: 1}}}
		}
		h.Rec.Patch(w.ID, linearizability.TxnOutput(&pb.TxnResponse{Header: hd, Succeeded: true, Responses: []*pb.ResponseOp{sub}}))
		h.applied++
		return nil
	}
	var deletes []*Write
	for _, w := range h.writes {
		switch {
		case w.Acked:
		case w.Kind == Remove:
			deletes = append(deletes, w)
		default:
			if ev, ok := byValue[w.Value]; ok {
				if err := patch(w, ev.Rev); err != nil {
					return err
				}
			} else {
				h.Rec.Drop(w.ID)
				h.dropped++
			}
		}
	}
	// An uncertain delete applied if the key's version it compared was
	// deleted by a revision nobody else claims. Two uncertain deletes of
	// the same version are the same request: either can take it.
	for _, w := range deletes {
		found := false
		for _, ev := range evs {
			if ev.Type == mvccpb.DELETE && string(ev.Kv.Key) == w.Key && ev.PrevKv.GetModRevision() == w.CmpRev {
				if _, taken := claimed[ev.Rev]; !taken {
					if err := patch(w, ev.Rev); err != nil {
						return err
					}
					found = true
				}
				break
			}
		}
		if !found {
			h.Rec.Drop(w.ID)
			h.dropped++
		}
	}
	for _, ev := range evs {
		if _, ok := claimed[ev.Rev]; ok {
			continue
		}
		why := ""
		for _, w := range h.writes {
			if ev.Type == mvccpb.PUT && w.Value == string(ev.Kv.Value) && w.Acked {
				why = fmt.Sprintf(" (%s was answered: succeeded=%v at r%d)", w.Describe(), w.Resp.Succeeded, w.Resp.Header.Revision)
			}
		}
		return fmt.Errorf("revision r%d applied but no call made it: %v%s", ev.Rev, DescribeEvents(byRev[ev.Rev]), why)
	}
	return nil
}

// Describe names the write for a message.
func (w *Write) Describe() string {
	kind := [...]string{"create", "update", "delete"}[w.Kind]
	return fmt.Sprintf("%s %s=%s if mod=r%d", kind, w.Key, w.Value, w.CmpRev)
}

// appliedAt reports whether the events of a revision are this write.
func (w *Write) appliedAt(evs []core.Event) bool {
	if len(evs) != 1 || string(evs[0].Kv.Key) != w.Key {
		return false
	}
	if w.Kind == Remove {
		return evs[0].Type == mvccpb.DELETE
	}
	return evs[0].Type == mvccpb.PUT && string(evs[0].Kv.Value) == w.Value
}
