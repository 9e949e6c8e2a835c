package badger

import (
	"bytes"
	"fmt"
	"testing"
)

func TestParseCompression(t *testing.T) {
	tests := []struct {
		name string
		want Compression
		bad  bool
	}{
		{"", CompressionAsStored, false},
		{"none", CompressionNone, false},
		{"snappy", CompressionSnappy, false},
		{"zstd", CompressionZSTD, false},
		{"lz4", CompressionAsStored, true},
		{"Snappy", CompressionAsStored, true},
	}
	for _, tt := range tests {
		got, err := ParseCompression(tt.name)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseCompression(%q) = %v, %v; want %v, error %v", tt.name, got, err, tt.want, tt.bad)
		}
		if !tt.bad && tt.name != "" && got.String() != tt.name {
			t.Errorf("ParseCompression(%q).String() = %q", tt.name, got)
		}
	}
}

// TestCompressionIsPerTable writes compressible values compressed, then
// reopens the store uncompressed (and back): the tables already written
// stay compressed and readable, and the new ones are written plain.
func TestCompressionIsPerTable(t *testing.T) {
	dir := t.TempDir()
	if r := writeGeneration(t, dir, 0, "snappy"); r > 0.2 {
		t.Errorf("snappy: tables take %.2f of their size, want them compressed", r)
	}
	if r := writeGeneration(t, dir, 1, "none"); r < 0.9 {
		t.Errorf("none: tables take %.2f of their size, want them plain", r)
	}
	if r := writeGeneration(t, dir, 2, "zstd"); r > 0.2 {
		t.Errorf("zstd: tables take %.2f of their size, want them compressed", r)
	}
}

// TestStoreKeepsItsCompression opens stores without a compression (the
// default): a new store writes plain tables, one written compressed goes
// on compressing, and an explicit compression overrides the store's.
func TestStoreKeepsItsCompression(t *testing.T) {
	stored := func(dir string) Compression {
		t.Helper()
		c, ok, err := StoredCompression(dir)
		if err != nil || !ok {
			t.Fatalf("StoredCompression(%s) = %v, %v, %v", dir, c, ok, err)
		}
		return c
	}
	if c, ok, err := StoredCompression(t.TempDir()); c != CompressionNone || ok || err != nil {
		t.Errorf("StoredCompression of an empty directory = %v, %v, %v; want none, false, nil", c, ok, err)
	}
	fresh := t.TempDir()
	if r := writeGeneration(t, fresh, 0, ""); r < 0.9 {
		t.Errorf("a new store by default: tables take %.2f of their size, want them plain", r)
	}
	if c := stored(fresh); c != CompressionNone {
		t.Errorf("a new store by default: StoredCompression = %v, want none", c)
	}

	old := t.TempDir()
	writeGeneration(t, old, 0, "zstd")
	if c := stored(old); c != CompressionZSTD {
		t.Errorf("after zstd: StoredCompression = %v", c)
	}
	if r := writeGeneration(t, old, 1, ""); r > 0.2 {
		t.Errorf("a zstd store by default: tables take %.2f of their size, want them compressed as before", r)
	}
	if r := writeGeneration(t, old, 2, "none"); r < 0.9 {
		t.Errorf("a zstd store opened with none: tables take %.2f of their size, want them plain", r)
	}
	if c := stored(old); c != CompressionNone {
		t.Errorf("after none: StoredCompression = %v, want none", c)
	}
	if r := writeGeneration(t, old, 3, ""); r < 0.9 {
		t.Errorf("a store last written plain, by default: tables take %.2f of their size, want them plain", r)
	}
}

// writeGeneration opens the store in dir with compression c, writes
// generation gen's keys and closes it, which flushes them to a level-0
// table of their own; it then reopens it and reads every generation up
// to gen. It returns what gen's tables take on disk against their size
// uncompressed.
func writeGeneration(t *testing.T, dir string, gen int, c string) (ratio float64) {
	t.Helper()
	value := func(gen, i int) []byte {
		return bytes.Repeat(fmt.Appendf(nil, "gen %d object %05d; ", gen, i), 200)
	}
	const keys = 500
	opts := quiet()
	var err error
	if opts.Compression, err = ParseCompression(c); err != nil {
		t.Fatal(err)
	}
	reopen := func() *Engine {
		e, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("open with %q: %v", c, err)
		}
		return e
	}
	e := reopen()
	for i := range keys {
		set(t, e, fmt.Appendf(nil, "g%d/%05d", gen, i), value(gen, i))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen()
	defer e.Close()
	for g := range gen + 1 {
		for i := range keys {
			got, err := read(e, fmt.Appendf(nil, "g%d/%05d", g, i))
			if err != nil || !bytes.Equal(got, value(g, i)) {
				t.Fatalf("generation %d, opened with %q: key %d of generation %d: %d bytes, %v", gen, c, i, g, len(got), err)
			}
		}
	}
	var disk, raw float64
	for _, ti := range e.db.Tables() {
		if bytes.HasPrefix(ti.Left, fmt.Appendf(nil, "g%d/", gen)) {
			disk += float64(ti.OnDiskSize)
			raw += float64(ti.UncompressedSize)
		}
	}
	if raw == 0 {
		t.Fatalf("generation %d wrote no table of its own", gen)
	}
	t.Logf("generation %d, %q: its tables take %.0f of %.0f bytes", gen, c, disk, raw)
	return disk / raw
}
