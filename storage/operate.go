package storage

import "context"

// The optional capabilities below are what the server asks of an engine
// to operate it (etcd's Status, quota, defragmentation and health), by
// type assertion: an engine that lacks one is served without it.

// Failer is an engine that can fail for good: Badger whose data
// directory was removed, turned read-only or returned an I/O error.
// Failed reports why, or nil while it works. The server then refuses
// writes as a stopped etcd member and reports itself unhealthy.
type Failer interface {
	Failed() error
}

// Sizer is an engine that measures the disk space its data takes, in
// bytes (Badger: its data directory), for etcd's Status db_size and for
// a quota given no directory to count. Engines whose space lives
// elsewhere (TiKV) are not one.
type Sizer interface {
	Size() int64
}

// InUser is an engine that estimates the bytes of data it holds that a
// defragmentation would keep (Badger), as etcd's db_size_in_use counts
// the pages of its database in use.
type InUser interface {
	InUse() int64
}

// Defragmenter is an engine that can give back the space of data no
// reader needs any more (Badger), as etcd's Defragment does; engines that
// do it themselves (TiKV) are not one, and Defragment has nothing to do
// there.
type Defragmenter interface {
	Defrag(ctx context.Context) error
}

// DefragSpaceError is a Defragmenter's refusal for want of free disk
// space, nothing touched (Badger's *SpaceError): need is its estimate of
// what the defragmentation writes before it frees anything, have what is
// free. The server answers it in etcd's words.
type DefragSpaceError interface {
	error
	DefragSpace() (need, have int64)
}
