package badger

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4/options"
)

func TestParseCompression(t *testing.T) {
	tests := []struct {
		name string
		want options.CompressionType
		bad  bool
	}{
		{"", options.None, false},
		{"none", options.None, false},
		{"snappy", options.Snappy, false},
		{"zstd", options.ZSTD, false},
		{"lz4", options.None, true},
		{"Snappy", options.None, true},
	}
	for _, tt := range tests {
		got, err := ParseCompression(tt.name)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseCompression(%q) = %v, %v; want %v, error %v", tt.name, got, err, tt.want, tt.bad)
		}
	}
}

// TestCompressionIsPerTable writes compressible values compressed, then
// reopens the store uncompressed (and back): the tables already written
// stay compressed and readable, and the new ones are written plain.
func TestCompressionIsPerTable(t *testing.T) {
	dir := t.TempDir()
	value := func(gen, i int) []byte {
		return bytes.Repeat(fmt.Appendf(nil, "gen %d object %05d; ", gen, i), 200)
	}
	const keys = 500
	// Each generation writes its keys and closes, which flushes them to a
	// level-0 table of its own, reopens and reads every generation; ratio
	// is what its table takes on disk against its size uncompressed.
	generation := func(gen int, c string) (ratio float64) {
		opts := quiet()
		var err error
		if opts.Compression, err = ParseCompression(c); err != nil {
			t.Fatal(err)
		}
		reopen := func() *Engine {
			e, err := Open(dir, opts)
			if err != nil {
				t.Fatalf("open with %s: %v", c, err)
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
					t.Fatalf("generation %d, opened with %s: key %d of generation %d: %d bytes, %v", gen, c, i, g, len(got), err)
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
		t.Logf("generation %d, %s: its tables take %.0f of %.0f bytes", gen, c, disk, raw)
		return disk / raw
	}
	if r := generation(0, "snappy"); r > 0.2 {
		t.Errorf("snappy: tables take %.2f of their size, want them compressed", r)
	}
	if r := generation(1, "none"); r < 0.9 {
		t.Errorf("none: tables take %.2f of their size, want them plain", r)
	}
	if r := generation(2, "zstd"); r > 0.2 {
		t.Errorf("zstd: tables take %.2f of their size, want them compressed", r)
	}
}
