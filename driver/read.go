package driver

import (
	"context"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// Read is a read's engine snapshot at a commit point, with the compact
// revision and what its auth check knew of the store before the snapshot
// began (LookAuth: a role change or a failed change after it voids what
// the snapshot shows for later checks).
type Read struct {
	Txn            storage.Txn
	Rev, Compacted int64
	// Led says this member served the read at its own commit point.
	Led  bool
	Auth AuthLook
}

// BeginRead begins a read at commit point rev. A member that serves reads
// itself (ReadPoint: led) knows the compact revision; a follower's is
// read from the snapshot. The caller rolls Txn back.
func (d *Driver) BeginRead(ctx context.Context, eng storage.Engine, rev, compacted int64, led bool) (*Read, error) {
	r := &Read{Rev: rev, Compacted: compacted, Led: led, Auth: d.LookAuth(led)}
	bctx := ctx
	if led {
		// Every revision up to rev committed through this engine before
		// rev got there.
		bctx = storage.WithLeaderSnapshot(ctx)
	}
	txn, err := eng.Begin(d.beginCtx(bctx))
	if err != nil {
		return nil, err
	}
	if !led {
		if r.Compacted, err = core.ReadCompacted(storage.NewReader(txn)); err != nil {
			txn.Rollback()
			return nil, err
		}
	}
	r.Txn = txn
	return r, nil
}
