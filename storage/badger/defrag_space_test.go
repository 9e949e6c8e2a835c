package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/fsutil"
	"github.com/axon-kv/axon/internal/tmpfstest"
)

// TestDefragRefusesWithoutSpace fills a small tmpfs almost full under a
// store with deleted data: Defrag refuses with a *SpaceError before it
// touches a file, the store keeps its data and takes writes, and once
// space is back Defrag runs and gives space back. It mounts a tmpfs, so
// it runs as root (as CI does) and skips otherwise.
func TestDefragRefusesWithoutSpace(t *testing.T) {
	mnt := tmpfstest.Mount(t, "96m")
	dir := filepath.Join(mnt, "data")
	e, err := Open(dir, Options{MemoryBudget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := rand.New(rand.NewChaCha8([32]byte{3}))
	want := map[string][]byte{}
	put := func(keys map[string][]byte, del []string) {
		t.Helper()
		tx, err := e.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range keys {
			if err := tx.Set([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range del {
			if err := tx.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// 24 MiB of incompressible values, then half of them deleted.
	for i := range 384 / 8 {
		batch := map[string][]byte{}
		for j := range 8 {
			v := make([]byte, 64<<10)
			for k := range v {
				v[k] = byte(rng.Uint32())
			}
			batch[fmt.Sprintf("k%05d", i*8+j)] = v
		}
		put(batch, nil)
		for k, v := range batch {
			want[k] = v
		}
	}
	var del []string
	for k := range want {
		if k[len(k)-1]%2 == 0 {
			del = append(del, k)
		}
	}
	for chunk := range slices.Chunk(del, 64) {
		put(nil, chunk)
		for _, k := range chunk {
			delete(want, k)
		}
	}
	check := func(what string) {
		t.Helper()
		tx, err := e.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for k, v := range want {
			got, err := tx.Get([]byte(k))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("%s: %s: %d bytes, %v", what, k, len(got), err)
			}
		}
	}
	// Reopened, the store is at rest: Close flushed the memtables, and no
	// flush or compaction runs in the background to change the files.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(dir, Options{MemoryBudget: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	need, have, err := e.DefragSpace()
	if err != nil {
		t.Fatal(err)
	}
	// Leave 4 MiB less than Defrag needs: no less, for a full tmpfs kills
	// badger with SIGBUS, and the writes below need room.
	filler := filepath.Join(mnt, "filler")
	left := need - 4<<20
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, have-left); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	f.Close()
	listing := func() string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, d := range entries {
			if d.Name() == probeName {
				continue
			}
			info, err := d.Info()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %d %v\n", d.Name(), info.Size(), info.ModTime())
		}
		return b.String()
	}
	before := listing()
	err = e.Defrag(ctx)
	var se *SpaceError
	if !errors.As(err, &se) {
		t.Fatalf("defrag with %d bytes free: %v, want a *SpaceError", left, err)
	}
	t.Logf("refused: %v", err)
	if se.Have >= se.Need || se.Have > left+(1<<20) || !strings.Contains(err.Error(), "not enough free space to defragment: need") {
		t.Errorf("refusal %+v, estimated need %d with %d bytes left", se, need, left)
	}
	if after := listing(); after != before {
		t.Errorf("the refused defrag touched the directory:\nbefore:\n%safter:\n%s", before, after)
	}
	check("after the refusal")
	put(map[string][]byte{"after-refusal": []byte("v")}, nil)
	want["after-refusal"] = []byte("v")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	used, err := fsutil.DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.Defrag(ctx); err != nil {
		t.Fatalf("defrag with space: %v", err)
	}
	after, err := fsutil.DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("defrag with space took %v: %d MiB → %d MiB (estimate needed %d MiB)", time.Since(start).Round(time.Millisecond), used>>20, after>>20, need>>20)
	if after >= used {
		t.Errorf("defrag gave nothing back: %d bytes before, %d after", used, after)
	}
	check("after the defrag")
}
