package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/etcdtest"
)

// TestSnapshotRestoreMovesAnEtcdIntoAxon: `axon snapshot restore` of a
// real etcd's `snapshot save`, then `axon serve` on the restored data
// dir, answers with etcd's keys at etcd's revisions; a second restore
// into the same dir is refused.
func TestSnapshotRestoreMovesAnEtcdIntoAxon(t *testing.T) {
	bin := buildAxon(t)
	u := etcdtest.Start(t)
	ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{u.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ecli.Close()
	ctx := t.Context()
	var last *clientv3.PutResponse
	for _, kv := range [][2]string{{"/registry/a", "1"}, {"/registry/b", "2"}, {"/registry/a", "3"}} {
		if last, err = ecli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "etcd.db")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{u.String()}}, file); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "axon.data")
	out, err := exec.Command(bin, "snapshot", "restore", file, "--data-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "restored "+file+": revision 4, compacted at 0, 3 versions, 0 leases") {
		t.Fatalf("axon snapshot restore: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "snapshot", "restore", file, "--data-dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not empty") {
		t.Fatalf("a second restore into the same dir: %v\n%s", err, out)
	}
	cmd, cli := startServe(t, bin, dir)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	defer cli.Close()
	got, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != last.Header.Revision || len(got.Kvs) != 2 || string(got.Kvs[0].Value) != "3" || got.Kvs[0].Version != 2 {
		t.Fatalf("Axon on the restored dir: r%d %v; etcd was at r%d", got.Header.Revision, got.Kvs, last.Header.Revision)
	}
}
