package server

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/storage"
)

// snapshotChunk is the blob size of each message, as etcd sends.
const snapshotChunk = 32 << 10

// Snapshot streams a backup of the store as etcd's own snapshot, a bbolt
// database with etcd's schema, then its SHA-256, as etcd does: `etcdctl
// snapshot save` stores it and `etcdutl snapshot restore` turns it into
// an etcd data directory. It holds the history since the compact
// revision, the versions alive then, and the leases, all as of one commit
// point. The database is built in a scratch file under TMPDIR first,
// since its size goes in every message.
func (m maintenanceServer) Snapshot(_ *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	ctx := stream.Context()
	if err := m.s.authorize(ctx, nil, false, admin); err != nil {
		return toGRPC(err)
	}
	start := time.Now()
	dir, err := os.MkdirTemp("", "axon-snapshot-")
	if err != nil {
		return toGRPC(fmt.Errorf("snapshot: %w", err))
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "db")
	rev, err := m.writeSnapshot(stream, path)
	if err != nil {
		return toGRPC(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return toGRPC(fmt.Errorf("snapshot: %w", err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return toGRPC(fmt.Errorf("snapshot: %w", err))
	}
	total := st.Size()
	m.s.log.Info("sending database snapshot to client", "revision", rev, "bytes", total, "built in", time.Since(start))
	h := sha256.New()
	version := etcdsnap.StorageVersion.String()
	for sent := int64(0); sent < total; {
		if err := ctx.Err(); err != nil {
			return toGRPC(err)
		}
		// A fresh buffer per message: Send may not have sent the last one
		// yet when it returns.
		buf := make([]byte, min(snapshotChunk, total-sent))
		if _, err := io.ReadFull(f, buf); err != nil {
			return toGRPC(fmt.Errorf("snapshot: %w", err))
		}
		sent += int64(len(buf))
		h.Write(buf)
		if err := stream.Send(&pb.SnapshotResponse{RemainingBytes: uint64(total - sent), Blob: buf, Version: version}); err != nil {
			return err
		}
	}
	return stream.Send(&pb.SnapshotResponse{Blob: h.Sum(nil), Version: version})
}

// writeSnapshot writes the snapshot database at path and returns the
// commit point it holds.
func (m maintenanceServer) writeSnapshot(stream pb.Maintenance_SnapshotServer, path string) (int64, error) {
	txn, c, compacted, err := m.s.snapshot(stream.Context(), false)
	if err != nil {
		return 0, err
	}
	defer txn.Rollback()
	rd := storage.NewReader(txn)
	w, err := etcdsnap.Create(path)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	if err := core.Export(rd, compacted, c, 0, w.Put); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	leases, err := core.ReadLeases(rd)
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	for _, l := range leases {
		if err := w.Lease(l.ID, l.TTL); err != nil {
			return 0, err
		}
	}
	// The auth store, in etcd's schema, as of the same snapshot.
	if st, err := auth.ReadAuth(rd); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	} else if st != nil {
		if err := w.Auth(st); err != nil {
			return 0, err
		}
	}
	return c, w.Finish(compacted)
}
