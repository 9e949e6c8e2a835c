package core_test

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core"
)

// Binary keys chosen to hit every branch of the escaping: the escape
// byte itself, the bytes used after it, and runs of them.
var binaryKeys = []struct {
	name string
	key  []byte
}{
	{"an empty key", []byte{}},
	{"a plain ASCII key", []byte("foo/bar")},
	{"a single zero byte", []byte{0x00}},
	{"two zero bytes", []byte{0x00, 0x00}},
	{"a key ending in zero", []byte{'a', 0x00}},
	{"a key of 0xFF bytes", []byte{0xFF, 0xFF}},
	{"a zero followed by 0x01", []byte{0x00, 0x01}},
	{"a zero followed by 0xFF", []byte{0x00, 0xFF}},
	{"a 0x01 alone", []byte{0x01}},
	{"mixed binary bytes", []byte{0x01, 0x00, 0xFF, 0x00, 0x7F, 0x80}},
}

func TestLatestKeyRoundTrips(t *testing.T) {
	for _, tc := range binaryKeys {
		t.Run(tc.name+" decodes to itself", func(t *testing.T) {
			got, err := core.DecodeLatestKey(core.LatestKey(tc.key))
			if err != nil {
				t.Fatalf("DecodeLatestKey: %v", err)
			}
			if !bytes.Equal(got, tc.key) {
				t.Fatalf("got %q, want %q", got, tc.key)
			}
		})
	}
}

func TestHistoryKeyRoundTrips(t *testing.T) {
	revs := []int64{0, 1, 255, 256, 1 << 40, math.MaxInt64}
	for _, tc := range binaryKeys {
		for _, rev := range revs {
			t.Run(tc.name+" at a revision decodes to both", func(t *testing.T) {
				key, got, err := core.DecodeHistoryKey(core.HistoryKey(tc.key, rev))
				if err != nil {
					t.Fatalf("DecodeHistoryKey: %v", err)
				}
				if !bytes.Equal(key, tc.key) || got != rev {
					t.Fatalf("got (%q, %d), want (%q, %d)", key, got, tc.key, rev)
				}
			})
		}
	}
}

func TestRevisionAndLeaseKeysRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 1, 42, 1 << 40, math.MaxInt64, -1} {
		t.Run("a revision decodes to itself", func(t *testing.T) {
			got, err := core.DecodeRevisionKey(core.RevisionKey(v))
			if err != nil || got != v {
				t.Fatalf("DecodeRevisionKey = %d, %v; want %d", got, err, v)
			}
		})
		t.Run("a lease id decodes to itself", func(t *testing.T) {
			got, err := core.DecodeLeaseKey(core.LeaseKey(v))
			if err != nil || got != v {
				t.Fatalf("DecodeLeaseKey = %d, %v; want %d", got, err, v)
			}
		})
	}
}

func TestRevisionKeysSortByRevisionWithinAShard(t *testing.T) {
	revs := []int64{3, 19, 259, 65539, 1<<32 + 3, math.MaxInt64 - 12}
	for i := 1; i < len(revs); i++ {
		if bytes.Compare(core.RevisionKey(revs[i-1]), core.RevisionKey(revs[i])) >= 0 {
			t.Fatalf("RevisionKey(%d) does not sort below RevisionKey(%d)", revs[i-1], revs[i])
		}
	}
}

// TestConsecutiveRevisionsSpreadOverShards: no run of writes lands in one
// range of the revision space (on TiKV, one region).
func TestConsecutiveRevisionsSpreadOverShards(t *testing.T) {
	seen := map[string]bool{}
	for rev := int64(1000); rev < 1000+core.RevisionShards; rev++ {
		k := core.RevisionKey(rev)
		shard := string(k[:6])
		if seen[shard] {
			t.Fatalf("revision %d shares a shard with one of the %d before it", rev, core.RevisionShards-1)
		}
		seen[shard] = true
		if bytes.Compare(k, core.RevisionShardStart(0)) < 0 || bytes.Compare(k, core.RevisionShardStart(core.RevisionShards)) >= 0 {
			t.Fatalf("RevisionKey(%d) = %x lies outside the revision shards", rev, k)
		}
	}
}

func TestSpacesDoNotOverlap(t *testing.T) {
	// Each decoder must refuse every other space's keys.
	keys := map[string][]byte{
		"latest":   core.LatestKey([]byte("k")),
		"history":  core.HistoryKey([]byte("k"), 1),
		"revision": core.RevisionKey(1),
		"lease":    core.LeaseKey(1),
		"meta":     core.MetaKey(core.MetaCompact),
	}
	decoders := map[string]func([]byte) error{
		"latest":   func(b []byte) error { _, err := core.DecodeLatestKey(b); return err },
		"history":  func(b []byte) error { _, _, err := core.DecodeHistoryKey(b); return err },
		"revision": func(b []byte) error { _, err := core.DecodeRevisionKey(b); return err },
		"lease":    func(b []byte) error { _, err := core.DecodeLeaseKey(b); return err },
	}
	for dname, dec := range decoders {
		for kname, k := range keys {
			want := error(nil)
			if dname != kname {
				want = core.ErrBadKey
			}
			t.Run("the "+dname+" decoder on a "+kname+" key", func(t *testing.T) {
				if err := dec(k); !errors.Is(err, want) {
					t.Fatalf("got %v, want %v", err, want)
				}
			})
		}
	}
}

func TestMalformedKeysAreRejected(t *testing.T) {
	latest := core.LatestKey([]byte("ab"))
	hist := core.HistoryKey([]byte("ab"), 7)
	rev := core.RevisionKey(7)
	lease := core.LeaseKey(7)
	badMagic := func(b []byte) []byte { c := bytes.Clone(b); c[0] ^= 0xFF; return c }
	cases := []struct {
		name string
		dec  func([]byte) error
		in   []byte
	}{
		{"latest: nil input", decLatest, nil},
		{"latest: only the magic", decLatest, latest[:4]},
		{"latest: wrong magic", decLatest, badMagic(latest)},
		{"latest: missing terminator", decLatest, latest[:len(latest)-2]},
		{"latest: a lone trailing zero", decLatest, latest[:len(latest)-1]},
		{"latest: zero followed by an invalid byte", decLatest, append(bytes.Clone(latest[:5]), 'a', 0x00, 0x02, 0x00, 0x01)},
		{"latest: bytes after the terminator", decLatest, append(bytes.Clone(latest), 'x')},
		{"history: nil input", decHistory, nil},
		{"history: wrong magic", decHistory, badMagic(hist)},
		{"history: revision cut short", decHistory, hist[:len(hist)-1]},
		{"history: revision too long", decHistory, append(bytes.Clone(hist), 0)},
		{"history: no terminator at all", decHistory, append(bytes.Clone(hist[:5]), 'a', 'b')},
		{"history: a latest key", decHistory, latest},
		{"revision: too short", decRevision, rev[:12]},
		{"revision: too long", decRevision, append(bytes.Clone(rev), 0)},
		{"revision: wrong magic", decRevision, badMagic(rev)},
		{"lease: too short", decLease, lease[:12]},
		{"lease: too long", decLease, append(bytes.Clone(lease), 0)},
		{"lease: empty", decLease, []byte{}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is ErrBadKey", func(t *testing.T) {
			if err := tc.dec(tc.in); !errors.Is(err, core.ErrBadKey) {
				t.Fatalf("got %v, want ErrBadKey", err)
			}
		})
	}
}

func decLatest(b []byte) error   { _, err := core.DecodeLatestKey(b); return err }
func decHistory(b []byte) error  { _, _, err := core.DecodeHistoryKey(b); return err }
func decRevision(b []byte) error { _, err := core.DecodeRevisionKey(b); return err }
func decLease(b []byte) error    { _, err := core.DecodeLeaseKey(b); return err }
func rapidKey(t *rapid.T, l string) []byte {
	// A small alphabet around the escape byte makes shared prefixes and
	// escapes common.
	return rapid.SliceOfN(rapid.SampledFrom([]byte{0x00, 0x01, 0x02, 0xFE, 0xFF, 'a'}), 0, 6).Draw(t, l)
}

func TestHistoryKeyOrderMatchesKeyThenRevision(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := rapidKey(t, "a"), rapidKey(t, "b")
		r1 := rapid.Int64Range(0, math.MaxInt64).Draw(t, "r1")
		r2 := rapid.Int64Range(0, math.MaxInt64).Draw(t, "r2")
		want := cmp.Or(bytes.Compare(a, b), cmp.Compare(r1, r2))
		if got := bytes.Compare(core.HistoryKey(a, r1), core.HistoryKey(b, r2)); got != want {
			t.Fatalf("order of (%q,%d) vs (%q,%d): encoded %d, raw %d", a, r1, b, r2, got, want)
		}
	})
}

func TestLatestKeyOrderMatchesRawOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := rapidKey(t, "a"), rapidKey(t, "b")
		if got, want := bytes.Compare(core.LatestKey(a), core.LatestKey(b)), bytes.Compare(a, b); got != want {
			t.Fatalf("order of %q vs %q: encoded %d, raw %d", a, b, got, want)
		}
	})
}

func TestNoEncodingIsAPrefixOfAnother(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := rapidKey(t, "a"), rapidKey(t, "b")
		if bytes.Equal(a, b) {
			t.Skip("same key")
		}
		la, lb := core.LatestKey(a), core.LatestKey(b)
		if bytes.HasPrefix(la, lb) || bytes.HasPrefix(lb, la) {
			t.Fatalf("latest encodings of %q and %q are prefixes", a, b)
		}
		// History keys of distinct raw keys must not share the escaped
		// part either, or a per-key scan would leak into another key.
		r := rapid.Int64Range(0, 1<<20).Draw(t, "r")
		ha, hb := core.HistoryKey(a, r), core.HistoryKey(b, r)
		pa, pb := ha[:len(ha)-8], hb[:len(hb)-8]
		if bytes.HasPrefix(pa, pb) || bytes.HasPrefix(pb, pa) {
			t.Fatalf("history encodings of %q and %q are prefixes", a, b)
		}
	})
}

func TestDecodedKeyDoesNotAliasItsInput(t *testing.T) {
	enc := core.LatestKey([]byte("abc"))
	key, err := core.DecodeLatestKey(enc)
	if err != nil {
		t.Fatal(err)
	}
	enc[5] = 'z'
	if string(key) != "abc" {
		t.Fatalf("decoded key changed with its input: %q", key)
	}
}

func TestAttachKeyRoundTrip(t *testing.T) {
	for _, k := range []string{"", "a", "a\x00b", "\x00\xff\x01"} {
		id, key, err := core.DecodeAttachKey(core.AttachKey(42, []byte(k)))
		if err != nil || id != 42 || string(key) != k {
			t.Errorf("AttachKey(42, %q) decodes to %d %q %v", k, id, key, err)
		}
	}
	if _, _, err := core.DecodeAttachKey(core.LeaseKey(42)); err == nil {
		t.Error("a lease key decoded as an attachment")
	}
}
