package linearizability

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Input is one client request. Exactly one field is set.
type Input struct {
	// KV is a Range, Put, DeleteRange or Txn.
	KV      *pb.RequestOp
	Grant   *pb.LeaseGrantRequest
	Revoke  *pb.LeaseRevokeRequest
	Compact *pb.CompactionRequest
}

// Output is what the client got: the response matching its Input, or Err.
type Output struct {
	KV      *pb.ResponseOp
	Grant   *pb.LeaseGrantResponse
	Revoke  *pb.LeaseRevokeResponse
	Compact *pb.CompactionResponse
	// Err is the error text (etcd's, with or without the "etcdserver: "
	// prefix). Errors the model does not know are taken as definite
	// failures that changed nothing: record uncertain ones with Unknown.
	Err string

	// unknown: the client got no answer and nobody patched it.
	unknown bool
}

// Request inputs, for brevity at call sites.

// RangeInput wraps a RangeRequest.
func RangeInput(r *pb.RangeRequest) Input {
	return Input{KV: &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}}
}

// PutInput wraps a PutRequest.
func PutInput(r *pb.PutRequest) Input {
	return Input{KV: &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r}}}
}

// DeleteInput wraps a DeleteRangeRequest.
func DeleteInput(r *pb.DeleteRangeRequest) Input {
	return Input{KV: &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}}
}

// TxnInput wraps a TxnRequest.
func TxnInput(r *pb.TxnRequest) Input {
	return Input{KV: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r}}}
}

// RangeOutput wraps a RangeResponse.
func RangeOutput(r *pb.RangeResponse) Output {
	return Output{KV: &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}}}
}

// PutOutput wraps a PutResponse.
func PutOutput(r *pb.PutResponse) Output {
	return Output{KV: &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: r}}}
}

// DeleteOutput wraps a DeleteRangeResponse.
func DeleteOutput(r *pb.DeleteRangeResponse) Output {
	return Output{KV: &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: r}}}
}

// TxnOutput wraps a TxnResponse.
func TxnOutput(r *pb.TxnResponse) Output {
	return Output{KV: &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: r}}}
}

// ErrOutput records a failed request.
func ErrOutput(err error) Output { return Output{Err: err.Error()} }

// Revision returns the header revision of the response (0 if none).
func (o Output) Revision() int64 {
	var h *pb.ResponseHeader
	switch {
	case o.KV != nil:
		h = responseHeader(o.KV)
	case o.Grant != nil:
		h = o.Grant.Header
	case o.Revoke != nil:
		h = o.Revoke.Header
	case o.Compact != nil:
		h = o.Compact.Header
	}
	return h.GetRevision()
}

func responseHeader(r *pb.ResponseOp) *pb.ResponseHeader {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponseRange:
		return tv.ResponseRange.GetHeader()
	case *pb.ResponseOp_ResponsePut:
		return tv.ResponsePut.GetHeader()
	case *pb.ResponseOp_ResponseDeleteRange:
		return tv.ResponseDeleteRange.GetHeader()
	case *pb.ResponseOp_ResponseTxn:
		return tv.ResponseTxn.GetHeader()
	}
	return nil
}

// Error kinds the model can justify from its state.
type errKind int

const (
	errOther errKind = iota
	errCompacted
	errFutureRev
	errLeaseNotFound
	errLeaseExist
	errKeyNotFound
	// Refusals of etcd's gRPC layer, whatever the state (invalid.go).
	errEmptyKey
	errTooManyOps
	errDuplicateKey
	errValueProvided
	errLeaseProvided
	errInvalidSort
	errLeaseTTLTooLarge
)

// Canonical texts, as etcd's server side spells them.
const (
	ErrCompacted     = "mvcc: required revision has been compacted"
	ErrFutureRev     = "mvcc: required revision is a future revision"
	ErrLeaseNotFound = "etcdserver: requested lease not found"
	ErrLeaseExist    = "etcdserver: lease already exists"
	ErrKeyNotFound   = "etcdserver: key not found"
	ErrEmptyKey      = "etcdserver: key is not provided"
	ErrTooManyOps    = "etcdserver: too many operations in txn request"
	ErrDuplicateKey  = "etcdserver: duplicate key given in txn request"
	ErrValueProvided = "etcdserver: value is provided"
	ErrLeaseProvided = "etcdserver: lease is provided"
	ErrInvalidSort   = "etcdserver: invalid sort option"
	// ErrLeaseTTLTooLarge refuses a grant above MaxLeaseTTL.
	ErrLeaseTTLTooLarge = "etcdserver: too large lease TTL"
)

// classify matches by substring: clients see the same text with a gRPC
// status or an "etcdserver: " prefix around it.
func classify(s string) errKind {
	switch {
	case strings.Contains(s, "required revision has been compacted"):
		return errCompacted
	case strings.Contains(s, "required revision is a future revision"):
		return errFutureRev
	case strings.Contains(s, "requested lease not found"):
		return errLeaseNotFound
	case strings.Contains(s, "lease already exists"):
		return errLeaseExist
	case strings.Contains(s, "key not found"):
		return errKeyNotFound
	case strings.Contains(s, "key is not provided"):
		return errEmptyKey
	case strings.Contains(s, "too many operations in txn request"):
		return errTooManyOps
	case strings.Contains(s, "duplicate key given in txn request"):
		return errDuplicateKey
	case strings.Contains(s, "value is provided"):
		return errValueProvided
	case strings.Contains(s, "lease is provided"):
		return errLeaseProvided
	case strings.Contains(s, "invalid sort option"):
		return errInvalidSort
	case strings.Contains(s, "too large lease TTL"):
		return errLeaseTTLTooLarge
	}
	return errOther
}

// maxTime is +infinity for an operation that never returned.
const maxTime = math.MaxInt64

// OpID names a recorded operation.
type OpID int

type opStatus int

const (
	pending opStatus = iota
	returned
	unknown
	patched
	dropped
)

type recorded struct {
	client    int
	in        Input
	out       Output
	call, ret int64
	status    opStatus
}

// Recorder collects a history of client operations. Times are virtual
// nanoseconds. It is safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	ops []recorded
}

// Call records that client invoked in at time at.
func (r *Recorder) Call(client int, in Input, at int64) OpID {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, recorded{client: client, in: in, call: at})
	return OpID(len(r.ops) - 1)
}

// Return records the definite answer of id.
func (r *Recorder) Return(id OpID, out Output, at int64) {
	r.set(id, func(o *recorded) {
		o.out, o.ret, o.status = out, at, returned
	})
}

// Unknown records that id got no definite answer: it may take effect at
// any time after its call, so it returns at +infinity.
func (r *Recorder) Unknown(id OpID) {
	r.set(id, func(o *recorded) { o.status = unknown })
}

// Patch gives an unknown operation the outcome it really had (the
// simulator learns it by fencing). It still returns at +infinity.
func (r *Recorder) Patch(id OpID, out Output) {
	r.set(id, func(o *recorded) { o.out, o.status = out, patched })
}

// Drop removes an operation that definitely took no effect.
func (r *Recorder) Drop(id OpID) {
	r.set(id, func(o *recorded) { o.status = dropped })
}

func (r *Recorder) set(id OpID, f func(*recorded)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 0 || int(id) >= len(r.ops) {
		panic(fmt.Sprintf("linearizability: unknown operation %d", id))
	}
	f(&r.ops[id])
}

// Len returns the number of recorded operations.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns the history for Check. Operations still pending
// count as unknown. Unknown operations that cannot change state (reads)
// are left out: they constrain nothing. Client numbers are made dense, in
// their order, because the visualisation draws a row for every number up
// to the largest; the original number is the operation's Metadata.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var clients []int
	for _, o := range r.ops {
		clients = append(clients, o.client)
	}
	slices.Sort(clients)
	clients = slices.Compact(clients)
	ops := make([]porcupine.Operation, 0, len(r.ops))
	for _, o := range r.ops {
		row, _ := slices.BinarySearch(clients, o.client)
		op := porcupine.Operation{ClientId: row, Input: o.in, Call: o.call, Output: o.out, Return: o.ret, Metadata: o.client}
		switch o.status {
		case dropped:
			continue
		case pending, unknown:
			if readOnly(o.in) {
				continue
			}
			op.Output, op.Return = Output{unknown: true}, maxTime
		case patched:
			op.Return = maxTime
		}
		ops = append(ops, op)
	}
	return ops
}

// readOnly reports whether in can never change state.
func readOnly(in Input) bool {
	if in.KV == nil {
		return false
	}
	return requestReadOnly(in.KV)
}

func requestReadOnly(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return true
	case *pb.RequestOp_RequestTxn:
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.Success, tv.RequestTxn.Failure} {
			for _, o := range ops {
				if !requestReadOnly(o) {
					return false
				}
			}
		}
		return true
	}
	return false
}
