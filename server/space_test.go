package server_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// TestQuotaRaisesNoSpace fills a small quota through the API: writes that
// add data then fail with etcd's error, reads, deletes, compaction and
// revokes go on, the alarm is listed and survives a restart, and a disarm
// while still over the quota is followed by the alarm again.
func TestQuotaRaisesNoSpace(t *testing.T) {
	dir := t.TempDir()
	start := func() (*clientv3.Client, func()) {
		eng, err := badgerkv.Open(dir, badgerkv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, cli, stop := serveEngine(t, eng, server.Config{Core: core.Config{RingSize: 64}, MemberID: 7,
			Quota: server.Quota{Bytes: quotaBytes, Dir: dir, MinFree: -1}})
		shut := func() {
			stop()
			eng.Close()
		}
		t.Cleanup(shut)
		return cli, shut
	}
	cli, shut := start()
	ctx := ctxT(t)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/keep", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/stay", "v"); err != nil {
		t.Fatal(err)
	}
	// fill puts 100 KiB values until a put fails (at most 1,000).
	fill := func() (int, error) {
		value := strings.Repeat("x", 100<<10)
		for i := range 1000 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i), value); err != nil {
				return i, err
			}
		}
		return 1000, nil
	}
	puts, full := fill()
	if !errors.Is(full, rpctypes.ErrNoSpace) {
		t.Fatalf("after %d puts of 100 KiB into a %d-byte quota: %v, want %v", puts, quotaBytes, full, rpctypes.ErrNoSpace)
	}
	t.Logf("NOSPACE after %d puts", puts)
	checkNoSpace := func(cli *clientv3.Client) {
		t.Helper()
		if _, err := cli.Put(ctx, "/more", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("put under NOSPACE: %v", err)
		}
		if _, err := cli.Txn(ctx).Then(clientv3.OpPut("/more", "v")).Commit(); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("txn with a put under NOSPACE: %v", err)
		}
		if _, err := cli.Grant(ctx, 60); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("lease grant under NOSPACE: %v", err)
		}
		if r, err := cli.Get(ctx, "/stay"); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get under NOSPACE: %v %v", r, err)
		}
		al, err := cli.AlarmList(ctx)
		if err != nil || len(al.Alarms) != 1 || al.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
			t.Fatalf("alarm list: %v, %v", al, err)
		}
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "NOSPACE") {
			t.Fatalf("status errors: %v, %v", st, err)
		}
	}
	checkNoSpace(cli)
	// What frees space works.
	if _, err := cli.Delete(ctx, "/fill/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("revoke under NOSPACE: %v", err)
	}
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}
	// The alarm is stored: a restarted server still refuses.
	shut()
	cli, _ = start()
	checkNoSpace(cli)
	// Disarmed, writes go on until the data passes the quota again.
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: 7, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("disarm: %v", err)
	}
	if n, err := fill(); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("after a disarm, %d puts: %v", n, err)
	}
	checkNoSpace(cli)
}

// quotaBytes is a quota a few MiB above what an empty Badger takes.
const quotaBytes = 12 << 20
