package core_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core"
)

func TestRecordRoundTrips(t *testing.T) {
	cases := []struct {
		name string
		rec  core.Record
	}{
		{"a zero record", core.Record{}},
		{"a tombstone that was only touched", core.Record{Tombstone: true, Touch: 9}},
		{"a live value", core.Record{Touch: 5, ModRev: 5, CreateRev: 3, Version: 2, Lease: 7, Value: []byte("v")}},
		{"a binary value with zero bytes", core.Record{ModRev: 1, Value: []byte{0, 0xFF, 0, 1}}},
		{"the largest revisions", core.Record{Touch: math.MaxInt64, ModRev: math.MaxInt64, CreateRev: math.MaxInt64, Version: math.MaxInt64, Lease: math.MaxInt64}},
		{"a negative lease id", core.Record{Lease: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" decodes to itself", func(t *testing.T) {
			got, err := core.DecodeRecord(core.AppendRecord(nil, &tc.rec))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Value) == 0 {
				got.Value = tc.rec.Value // nil and empty are the same value
			}
			if !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("got %+v, want %+v", got, tc.rec)
			}
		})
	}
}

func TestAppendRecordKeepsThePrefix(t *testing.T) {
	rec := core.Record{ModRev: 3, Value: []byte("x")}
	out := core.AppendRecord([]byte("pre"), &rec)
	if !bytes.HasPrefix(out, []byte("pre")) {
		t.Fatalf("prefix lost: %q", out)
	}
	if got, err := core.DecodeRecord(out[3:]); err != nil || got.ModRev != 3 || string(got.Value) != "x" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestMalformedRecordsAreRejected(t *testing.T) {
	full := core.AppendRecord(nil, &core.Record{Touch: 300, ModRev: 300, CreateRev: 300, Version: 300, Lease: 300})
	cases := []struct {
		name string
		in   []byte
	}{
		{"nil input", nil},
		{"an unknown flag bit", []byte{0x02, 0, 0, 0, 0, 0}},
		{"only the flags", []byte{0x00}},
		{"a varint cut mid-way", full[:2]},
		{"the lease missing", full[:len(full)-2]},
		{"an overlong varint", append([]byte{0}, bytes.Repeat([]byte{0xFF}, 11)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is ErrBadRecord", func(t *testing.T) {
			if _, err := core.DecodeRecord(tc.in); !errors.Is(err, core.ErrBadRecord) {
				t.Fatalf("got %v, want ErrBadRecord", err)
			}
		})
	}
}

func TestRevisionRecordRoundTrips(t *testing.T) {
	cases := []struct {
		name string
		rec  core.RevisionRecord
	}{
		{"a fenced revision", core.RevisionRecord{Fenced: true}},
		{"a revision without events", core.RevisionRecord{Events: []core.RevisionEvent{}}},
		{"a put and a delete", core.RevisionRecord{Events: []core.RevisionEvent{{Key: []byte("a")}, {Delete: true, Key: []byte("b")}}}},
		{"binary and empty keys", core.RevisionRecord{Events: []core.RevisionEvent{{Key: []byte{0, 0xFF}}, {Key: []byte{}}}}},
		{"a long key", core.RevisionRecord{Events: []core.RevisionEvent{{Key: bytes.Repeat([]byte("k"), 300)}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" decodes to itself", func(t *testing.T) {
			got, err := core.DecodeRevisionRecord(core.AppendRevisionRecord(nil, &tc.rec))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("got %+v, want %+v", got, tc.rec)
			}
		})
	}
}

func TestMalformedRevisionRecordsAreRejected(t *testing.T) {
	good := core.AppendRevisionRecord(nil, &core.RevisionRecord{Events: []core.RevisionEvent{{Key: []byte("ab")}, {Delete: true, Key: []byte("c")}}})
	cases := []struct {
		name string
		in   []byte
	}{
		{"nil input", nil},
		{"an unknown kind", []byte{9}},
		{"a fence with trailing bytes", []byte{2, 0, 0}},
		{"an applied record without a count", []byte{1}},
		{"a count beyond the input", []byte{1, 0, 5, 0}},
		{"an unknown event type", []byte{1, 0, 1, 7, 0}},
		{"an event without its key length", []byte{1, 0, 1, 0}},
		{"a key length beyond the input", []byte{1, 0, 1, 0, 3, 'a'}},
		{"a record cut inside its last key", good[:len(good)-1]},
		{"trailing bytes after the events", append(bytes.Clone(good), 0)},
		{"a huge count", append([]byte{1}, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01)},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is ErrBadRecord", func(t *testing.T) {
			if _, err := core.DecodeRevisionRecord(tc.in); !errors.Is(err, core.ErrBadRecord) {
				t.Fatalf("got %v, want ErrBadRecord", err)
			}
		})
	}
}

func TestDecodersNeverPanicOnGarbage(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "b")
		_, _ = core.DecodeRecord(b)
		_, _ = core.DecodeRevisionRecord(b)
		_, _ = core.DecodeLeaseRecord(b)
		_, _ = core.DecodeElectionRecord(b)
	})
}

func TestRecordRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := core.Record{
			Tombstone: rapid.Bool().Draw(t, "tomb"),
			Touch:     rapid.Int64().Draw(t, "touch"),
			ModRev:    rapid.Int64().Draw(t, "mod"),
			CreateRev: rapid.Int64().Draw(t, "create"),
			Version:   rapid.Int64().Draw(t, "version"),
			Lease:     rapid.Int64().Draw(t, "lease"),
			Value:     rapid.SliceOfN(rapid.Byte(), 1, 16).Draw(t, "value"),
		}
		got, err := core.DecodeRecord(core.AppendRecord(nil, &rec))
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("got %+v, %v; want %+v", got, err, rec)
		}
	})
}
