package core

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Pageable reports whether a range can be answered page by page, each
// page read after the last was sent: its answer is in ascending key
// order with no filter on its keys, it spans more than one key, and it
// answers key-values, not only a count. Any other range is answered
// whole (Range).
func Pageable(req *pb.RangeRequest) bool {
	return keyOrdered(req) && len(req.RangeEnd) != 0 && !req.CountOnly
}

// RangePages reads a pageable range one page at a time, as etcd 3.7's
// RangeStream answers it: every page comes from one snapshot at one
// revision, so the pages' key-values in order are those Range answers at
// that revision, and the last page carries Range's header, count and
// more. Between pages it holds nothing but where the next one starts: the
// memory of a large list is that of one page.
type RangePages struct {
	rd     Reader
	req    *pb.RangeRequest
	rev    int64
	header int64
	from   []byte // the next page's first key
	left   int64  // keys the request's limit still allows; < 0: no limit
	read   int64  // keys in the pages so far
	done   bool
	// Testing plants bugs for the simulator; the server leaves it zero.
	Testing TestingKnobs
}

// NewRangePages starts reading req's pages from rd, a snapshot that holds
// every write up to committed, with the revision checks Range makes.
func NewRangePages(rd Reader, req *pb.RangeRequest, committed, compacted int64) (*RangePages, error) {
	if err := ValidateRange(req); err != nil {
		return nil, err
	}
	if !Pageable(req) {
		return nil, fmt.Errorf("core: range %q..%q is not pageable", req.Key, req.RangeEnd)
	}
	rev, header, err := CheckRevision(req.Revision, committed, compacted)
	if err != nil {
		return nil, err
	}
	left := req.Limit
	if left <= 0 {
		left = -1
	}
	return &RangePages{rd: rd, req: req, rev: rev, header: header, from: req.Key, left: left}, nil
}

// Next reads the next page, of at most size keys (size ≥ 1), holding
// what it copies in mem (nil: unbounded). The page is the last (done)
// once the range or the request's limit ends: only it has a header, count
// and more.
func (p *RangePages) Next(size int, mem Allowance) (resp *pb.RangeResponse, done bool, err error) {
	if p.done {
		return nil, false, fmt.Errorf("core: range %q..%q read past its last page", p.req.Key, p.req.RangeEnd)
	}
	n := int64(max(size, 1))
	if p.left >= 0 {
		n = min(n, p.left)
	}
	t := newTally(mem)
	// One key past the page says whether there is more without a count
	// of the rest; it is read again as the next page's first.
	s := pageScan{keep: int(n) + 1, keysOnly: p.req.KeysOnly, stop: true, mem: t}
	if err := s.run(p.rd, p.from, p.req.RangeEnd, p.rev); err != nil {
		return nil, false, err
	}
	more := int64(len(s.kvs)) > n
	kvs := s.kvs[:min(int64(len(s.kvs)), n)]
	p.read += int64(len(kvs))
	if p.left >= 0 {
		p.left -= int64(len(kvs))
	}
	if more {
		last := kvs[len(kvs)-1].Key
		p.from = append(last[:len(last):len(last)], 0)
	}
	resp = &pb.RangeResponse{Kvs: kvs}
	if more && p.left != 0 {
		return resp, false, t.flush()
	}
	p.done = true
	resp.Header = &pb.ResponseHeader{Revision: p.header}
	resp.Count, resp.More = p.read, more
	if more && !p.Testing.PagesCountOnlyRead {
		// The limit ends the answer: Range's count is of every key in
		// the range.
		rest := pageScan{keep: 0, keysOnly: true, mem: t}
		if err := rest.run(p.rd, p.from, p.req.RangeEnd, p.rev); err != nil {
			return nil, false, err
		}
		resp.Count += rest.count
	}
	return resp, true, t.flush()
}
