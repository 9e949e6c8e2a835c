package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFullDiskRaisesNoSpaceAndNeverCrashes fills a small filesystem
// through the API with 100 KiB incompressible values, killing the server
// with SIGKILL once on the way. The server must raise NOSPACE before
// Badger runs out of disk (a full filesystem kills Badger with SIGBUS in
// its mmapped files), keep serving reads, keep every acknowledged write,
// and start again on the nearly full disk. It mounts a tmpfs, so it runs
// as root (as CI does) and skips otherwise.
func TestFullDiskRaisesNoSpaceAndNeverCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=320m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	bin := filepath.Join(t.TempDir(), "axon")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	cmd, cli := startServe(t, bin, data)
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cli.Close()
	}
	t.Cleanup(func() { kill() })

	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	acked := map[string][]byte{}
	killAt := 50 + rng.IntN(200)
	var full error
	for i := 0; i < 4000 && full == nil; i++ {
		if i == killAt {
			kill()
			cmd, cli = startServe(t, bin, data)
		}
		key, value := fmt.Sprintf("/fill/%05d", i), make([]byte, 100<<10)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, full = cli.Put(ctx, key, string(value))
		cancel()
		if full == nil {
			acked[key] = value
		}
	}
	if !errors.Is(full, rpctypes.ErrNoSpace) {
		t.Fatalf("after %d acknowledged puts: %v, want %v", len(acked), full, rpctypes.ErrNoSpace)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil {
		t.Logf("NOSPACE after %d puts of 100 KiB (killed at %d); %d MiB free", len(acked), killAt, int64(st.Bavail)*int64(st.Bsize)>>20)
	}
	check := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for key, value := range acked {
			r, err := cli.Get(ctx, key)
			if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != string(value) {
				t.Fatalf("%s: acknowledged %s: %v (%d kvs)", what, key, err, len(r.Kvs))
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
	// Deleting and compacting work under the alarm.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := cli.Delete(ctx, "/fill/", clientv3.WithPrefix())
	if err != nil || int(d.Deleted) != len(acked) {
		t.Fatalf("delete: %v, %v", d, err)
	}
	if _, err := cli.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
}
