package core

import "errors"

// Errors with etcd's own texts. The server maps each to etcd's gRPC error
// (rpctypes) with errors.Is; core cannot import grpc.
var (
	ErrCompacted         = errors.New("mvcc: required revision has been compacted")
	ErrFutureRev         = errors.New("mvcc: required revision is a future revision")
	ErrEmptyKey          = errors.New("etcdserver: key is not provided")
	ErrTooManyOps        = errors.New("etcdserver: too many operations in txn request")
	ErrDuplicateKey      = errors.New("etcdserver: duplicate key given in txn request")
	ErrKeyNotFound       = errors.New("etcdserver: key not found")
	ErrValueProvided     = errors.New("etcdserver: value is provided")
	ErrLeaseProvided     = errors.New("etcdserver: lease is provided")
	ErrLeaseNotFound     = errors.New("etcdserver: requested lease not found")
	ErrLeaseExist        = errors.New("etcdserver: lease already exists")
	ErrLeaseTTLTooLarge  = errors.New("etcdserver: too large lease TTL")
	ErrRequestTooLarge   = errors.New("etcdserver: request is too large")
	ErrNoLeader          = errors.New("etcdserver: no leader")
	ErrNotLeader         = errors.New("etcdserver: not leader")
	ErrStopped           = errors.New("etcdserver: server stopped")
	ErrTimeout           = errors.New("etcdserver: request timed out")
	ErrEmptyRequest      = errors.New("core: empty request")
	ErrWatcherExists     = errors.New("mvcc: watcher already exists")
	ErrWatcherNotFound   = errors.New("mvcc: watcher not found")
	ErrInvalidSortOption = errors.New("etcdserver: invalid sort option")
	ErrTooManyRequests   = errors.New("etcdserver: too many requests")
	ErrNoSpace           = errors.New("etcdserver: mvcc: database space exceeded")
	ErrRetriesExhausted  = errors.New("core: request retried too often; engine keeps failing")
	errLate              = errors.New("core: write is late")
)
