package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// A call under the threshold writes nothing.
func TestFastRequestWritesNoTrace(t *testing.T) {
	dir := t.TempDir()
	st, err := newSlowTracer(dir, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil || st == nil {
		t.Fatalf("newSlowTracer: %v, %v", st, err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Put"}
	if _, err := st.unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	st.stop()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a fast call wrote %d files", len(ents))
	}
}

// A directory keeps the newest slowTracesKept traces and nothing else is
// touched.
func TestSlowTracesArePruned(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range slowTracesKept + 3 {
		name := fmt.Sprintf("slow-20261128T1200%02d.000-Txn-150ms.trace", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("go 1."), 0o644); err != nil {
			t.Fatal(err)
		}
		if i >= 3 {
			want = append(want, name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want = append(want, "notes.txt")
	if err := (&slowTracer{dir: dir}).prune(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after pruning: %v\nwant %v", got, want)
	}
}
