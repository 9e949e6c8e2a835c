package badger

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	bdb "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Compression is how the blocks of the tables written from now on are
// compressed.
//
// Tables of a new store are uncompressed by default, as etcd's bbolt is.
// Compressed, a table's blocks are decompressed into Go's heap at each
// read that misses the block cache, and the block cache (1/8 of the
// budget) and the builders' compressed copies live there too; under a
// small budget that heap is what makes the GC work (the storm in a 1 GiB
// cgroup: 0.18–0.22 million writes in the minute after, 0.22–0.27
// million uncompressed). Compression pays where values compress and
// disk, not memory, is short: what a kube-apiserver writes takes about
// half the disk under Snappy (kube's TestAPIServerDisk).
//
// A store keeps the compression its tables have (CompressionAsStored)
// unless told otherwise: an upgrade that turned Snappy off would let
// compaction rewrite a store near its quota at twice the size, and raise
// NOSPACE.
type Compression uint8

const (
	// CompressionAsStored is what the store's newest table uses, or none
	// for a store without tables.
	CompressionAsStored Compression = iota
	CompressionNone
	CompressionSnappy
	CompressionZSTD
)

var compressionNames = []string{"", "none", "snappy", "zstd"}

// badgerTypes is badger's name for each Compression but AsStored.
var badgerTypes = []options.CompressionType{CompressionNone: options.None, CompressionSnappy: options.Snappy, CompressionZSTD: options.ZSTD}

func (c Compression) String() string {
	if c == CompressionAsStored {
		return "as stored"
	}
	if int(c) < len(compressionNames) {
		return compressionNames[c]
	}
	return fmt.Sprintf("Compression(%d)", c)
}

// ParseCompression reads the name of a kind of table compression: none,
// snappy or zstd; "" is CompressionAsStored.
func ParseCompression(name string) (Compression, error) {
	if i := slices.Index(compressionNames, name); i >= 0 {
		return Compression(i), nil
	}
	return CompressionAsStored, fmt.Errorf("table compression %q: want none, snappy or zstd", name)
}

// resolve is the badger compression to open dir with: c, or for
// CompressionAsStored the one of the store's newest table (which the
// last writer wrote, by compaction if not by flush). It logs a store
// that stays compressed, and one asked to turn compression off.
func (c Compression) resolve(dir string, log *slog.Logger) options.CompressionType {
	if c != CompressionAsStored && c != CompressionNone {
		return badgerTypes[c]
	}
	stored, ok, err := StoredCompression(dir)
	switch {
	case err != nil:
		// Badger reads the manifest again on open, and says what is wrong.
		log.Warn("badger: cannot tell the tables' compression; new tables are uncompressed", "err", err)
		return options.None
	case !ok || stored == CompressionNone:
		return options.None
	case c == CompressionNone:
		log.Warn("badger: the store's tables are compressed and will be rewritten plain as they compact, taking more disk (about twice, for Kubernetes objects): mind --quota-backend-bytes", "stored", stored.String())
		return options.None
	}
	log.Info("badger: new tables are compressed as the store's are (--badger-compression=none writes them plain, which takes more disk)", "compression", stored.String())
	return badgerTypes[stored]
}

// StoredCompression reports the compression of the newest table of the
// store in dir, read from badger's manifest; ok is false if the store
// has no table (a new directory, or one never flushed).
func StoredCompression(dir string) (c Compression, ok bool, err error) {
	f, err := os.Open(filepath.Join(dir, bdb.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return CompressionNone, false, nil
	}
	if err != nil {
		return CompressionNone, false, err
	}
	defer f.Close()
	m, _, err := bdb.ReplayManifestFile(f, 0, bdb.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return CompressionNone, false, fmt.Errorf("badger: manifest of %s: %w", dir, err)
	}
	var newest uint64
	for id := range m.Tables {
		if !ok || id > newest {
			newest, ok = id, true
		}
	}
	if !ok {
		return CompressionNone, false, nil
	}
	bt := m.Tables[newest].Compression
	if i := slices.Index(badgerTypes[CompressionNone:], bt); i >= 0 {
		return CompressionNone + Compression(i), true, nil
	}
	return CompressionNone, false, fmt.Errorf("badger: manifest of %s: table %d has compression %d, which Axon does not know", dir, newest, bt)
}

// blockCache is the block cache badger gets: none for uncompressed
// tables, whose blocks it reads in place through their mapping.
func blockCache(c options.CompressionType, sz sizes) int64 {
	if c == options.None {
		return 0
	}
	return sz.blockCache
}
