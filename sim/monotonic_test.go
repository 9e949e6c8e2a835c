package sim

import (
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestMonotonicReadsCheck: the check of serializable reads per node
// incarnation fails a read answered below a read or a write the node had
// answered before it took the call, and lets calls it served at once come
// in any order, or two nodes differ.
func TestMonotonicReadsCheck(t *testing.T) {
	read := func(by string, from, to time.Duration, rev int64) *call {
		return &call{in: input{kind: opRange, rng: &pb.RangeRequest{Key: []byte("k"), Serializable: true}},
			status: answered, rev: rev, readBy: by, readFrom: from, readTo: to, answeredBy: by, answeredAt: to}
	}
	write := func(by string, to time.Duration, rev int64) *call {
		return &call{in: input{kind: opWrite, write: putOp("k", []byte("v"), 0)}, status: answered, rev: rev, answeredBy: by, answeredAt: to}
	}
	for _, tc := range []struct {
		name  string
		calls []*call
		want  string
	}{
		{"in order", []*call{read("n0.1", 1, 2, 5), read("n0.1", 3, 4, 7)}, ""},
		{"at once", []*call{read("n0.1", 1, 4, 7), read("n0.1", 2, 3, 5)}, ""},
		{"two nodes", []*call{read("n0.1", 1, 2, 7), read("n1.1", 3, 4, 5)}, ""},
		{"two incarnations", []*call{read("n0.1", 1, 2, 7), read("n0.2", 3, 4, 5)}, ""},
		{"back", []*call{read("n0.1", 1, 2, 7), read("n0.1", 3, 4, 5)}, "went back"},
		{"below a write it answered", []*call{write("n0.1", 2, 9), read("n0.1", 3, 4, 7)}, "went back"},
		{"a write answered meanwhile", []*call{write("n0.1", 3, 9), read("n0.1", 2, 4, 7)}, ""},
		{"a write another node answered", []*call{write("n1.1", 2, 9), read("n0.1", 3, 4, 7)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &World{hist: &history{}}
			for i, c := range tc.calls {
				c.id = i
				w.hist.calls = append(w.hist.calls, c)
			}
			err := w.checkMonotonicReads()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("failed a good history: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
