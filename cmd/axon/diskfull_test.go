package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/internal/tmpfstest"
)

// TestFullDiskRaisesNoSpaceAndNeverCrashes fills a small filesystem
// through the API with 100 KiB incompressible values, killing the server
// with SIGKILL at three random points on the way. The server must raise
// NOSPACE before Badger runs out of disk (a full filesystem kills Badger
// with SIGBUS in its mmapped files), keep serving reads, keep every
// acknowledged write, start again on the nearly full disk, and after
// delete, compact, defragment and disarm (etcd's recovery) take writes
// again. It mounts a tmpfs, so it runs as root (as CI does) and skips
// otherwise.
func TestFullDiskRaisesNoSpaceAndNeverCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := tmpfstest.Mount(t, "320m")
	bin := buildAxon(t)
	data := filepath.Join(dir, "data")
	cmd, cli := startServe(t, bin, data)
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cli.Close()
	}
	t.Cleanup(func() { kill() })

	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, "/stay", "before"); err != nil {
		t.Fatal(err)
	}
	// Three kills at random points, each while a put is in flight: that
	// put's outcome is unknown, so it may be there or not, but whole.
	acked, unknown := map[string][]byte{}, map[string][]byte{}
	killAt := []int{20 + rng.IntN(200), 250 + rng.IntN(250), 550 + rng.IntN(300)}
	var full error
	for i := 0; i < 4000 && full == nil; i++ {
		key, value := fmt.Sprintf("/fill/%05d", i), make([]byte, 100<<10)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		put := func() error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := cli.Put(ctx, key, string(value))
			return err
		}
		if len(killAt) > 0 && i == killAt[0] {
			killAt = killAt[1:]
			errc := make(chan error, 1)
			go func() { errc <- put() }()
			time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond) // a random point in the put
			kill()
			if err := <-errc; err == nil {
				acked[key] = value
			} else {
				unknown[key] = value
			}
			cmd, cli = startServe(t, bin, data)
			continue
		}
		if full = put(); full == nil {
			acked[key] = value
		}
	}
	if !errors.Is(full, rpctypes.ErrNoSpace) {
		t.Fatalf("after %d acknowledged puts: %v, want %v", len(acked), full, rpctypes.ErrNoSpace)
	}
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}
	atAlarm := free()
	t.Logf("NOSPACE after %d acknowledged puts of 100 KiB (%d unknown, killed 3 times); %d MiB free of 320", len(acked), len(unknown), atAlarm>>20)
	if atAlarm < 64<<20 {
		t.Fatalf("the alarm rose with %d bytes free: too late", atAlarm)
	}
	check := func(what string) {
		t.Helper()
		for key, value := range acked {
			r, err := cli.Get(ctx, key)
			if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != string(value) {
				t.Fatalf("%s: acknowledged %s: %v (%d kvs)", what, key, err, len(r.Kvs))
			}
		}
		for key, value := range unknown {
			r, err := cli.Get(ctx, key)
			if err != nil || len(r.Kvs) > 1 || len(r.Kvs) == 1 && string(r.Kvs[0].Value) != string(value) {
				t.Fatalf("%s: %s, put when killed: %v (%d kvs)", what, key, err, len(r.Kvs))
			}
		}
		al, err := cli.AlarmList(ctx)
		if err != nil || len(al.Alarms) != 1 || al.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
			t.Fatalf("%s: alarm list %v, %v", what, al, err)
		}
		if _, err := cli.Put(ctx, "/more", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("%s: put: %v", what, err)
		}
	}
	check("on the full disk")
	// Killed and started on the nearly full disk, it starts in alarm mode.
	kill()
	cmd, cli = startServe(t, bin, data)
	check("after a restart on the full disk")
	// Space comes back as with etcd: delete, compact, defragment, disarm.
	d, err := cli.Delete(ctx, "/fill/", clientv3.WithPrefix())
	if err != nil || int(d.Deleted) < len(acked) {
		t.Fatalf("delete: %v, %v", d, err)
	}
	if _, err := cli.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	beforeDefrag := free()
	start := time.Now()
	if _, err := cli.Defragment(ctx, cli.Endpoints()[0]); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	afterDefrag := free()
	t.Logf("defragment took %v: %d MiB free before, %d MiB after", time.Since(start).Round(time.Millisecond), beforeDefrag>>20, afterDefrag>>20)
	if afterDefrag-beforeDefrag < int64(len(acked))*(100<<10)/2 {
		t.Fatalf("defragment gave back %d bytes of the %d deleted", afterDefrag-beforeDefrag, len(acked)*(100<<10))
	}
	// As `etcdctl alarm disarm`: no member and no type disarm every alarm
	// listed (member 0's NOSPACE alone would be another alarm, as in etcd).
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatalf("disarm: %v", err)
	}
	if _, err := cli.Put(ctx, "/after", "v"); err != nil {
		t.Fatalf("put after compact, defragment and disarm: %v", err)
	}
	// Still true after one more kill: the disarm and the new write stay.
	kill()
	cmd, cli = startServe(t, bin, data)
	if al, err := cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms after the disarm and a restart: %v, %v", al, err)
	}
	for key, want := range map[string]string{"/stay": "before", "/after": "v"} {
		if r, err := cli.Get(ctx, key); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != want {
			t.Fatalf("%s after the disarm and a restart: %v, %v", key, r, err)
		}
	}
	if _, err := cli.Put(ctx, "/later", "v"); err != nil {
		t.Fatalf("put after a restart: %v", err)
	}
}
