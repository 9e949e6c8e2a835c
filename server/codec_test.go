package server

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func genBytes(t *rapid.T, label string) []byte {
	switch rapid.IntRange(0, 3).Draw(t, label+"kind") {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	return rapid.SliceOfN(rapid.Byte(), 1, 40).Draw(t, label)
}

func genInt(t *rapid.T, label string) int64 {
	if rapid.Bool().Draw(t, label+"zero") {
		return 0
	}
	return rapid.Int64().Draw(t, label)
}

func genCompare(t *rapid.T) *pb.Compare {
	c := &pb.Compare{
		Result:   pb.Compare_CompareResult(rapid.Int32Range(-1, 4).Draw(t, "result")),
		Target:   pb.Compare_CompareTarget(rapid.Int32Range(-1, 5).Draw(t, "target")),
		Key:      genBytes(t, "key"),
		RangeEnd: genBytes(t, "end"),
	}
	switch rapid.IntRange(0, 5).Draw(t, "union") {
	case 1:
		c.TargetUnion = &pb.Compare_Version{Version: genInt(t, "v")}
	case 2:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: genInt(t, "c")}
	case 3:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: genInt(t, "m")}
	case 4:
		c.TargetUnion = &pb.Compare_Value{Value: genBytes(t, "value")}
	case 5:
		c.TargetUnion = &pb.Compare_Lease{Lease: genInt(t, "l")}
	}
	return c
}

func genRange(t *rapid.T) *pb.RangeRequest {
	return &pb.RangeRequest{
		Key: genBytes(t, "key"), RangeEnd: genBytes(t, "end"), Limit: genInt(t, "limit"), Revision: genInt(t, "rev"),
		SortOrder: pb.RangeRequest_SortOrder(rapid.Int32Range(-1, 3).Draw(t, "order")), SortTarget: pb.RangeRequest_SortTarget(rapid.Int32Range(-1, 5).Draw(t, "target")),
		Serializable: rapid.Bool().Draw(t, "ser"), KeysOnly: rapid.Bool().Draw(t, "keys"), CountOnly: rapid.Bool().Draw(t, "count"),
		MinModRevision: genInt(t, "minmod"), MaxModRevision: genInt(t, "maxmod"), MinCreateRevision: genInt(t, "mincreate"), MaxCreateRevision: genInt(t, "maxcreate"),
	}
}

func genPut(t *rapid.T) *pb.PutRequest {
	return &pb.PutRequest{Key: genBytes(t, "key"), Value: genBytes(t, "value"), Lease: genInt(t, "lease"),
		PrevKv: rapid.Bool().Draw(t, "prev"), IgnoreValue: rapid.Bool().Draw(t, "iv"), IgnoreLease: rapid.Bool().Draw(t, "il")}
}

func genDeleteRange(t *rapid.T) *pb.DeleteRangeRequest {
	return &pb.DeleteRangeRequest{Key: genBytes(t, "key"), RangeEnd: genBytes(t, "end"), PrevKv: rapid.Bool().Draw(t, "prev")}
}

func genOps(t *rapid.T, depth int) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, rapid.IntRange(0, 3).Draw(t, "ops"))
	for i := range ops {
		op := &pb.RequestOp{}
		switch rapid.IntRange(0, 4).Draw(t, "op") {
		case 1:
			op.Request = &pb.RequestOp_RequestRange{RequestRange: genRange(t)}
		case 2:
			op.Request = &pb.RequestOp_RequestPut{RequestPut: genPut(t)}
		case 3:
			op.Request = &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: genDeleteRange(t)}
		case 4:
			if depth < 3 {
				op.Request = &pb.RequestOp_RequestTxn{RequestTxn: genTxn(t, depth+1)}
			}
		}
		ops[i] = op
	}
	return ops
}

func genTxn(t *rapid.T, depth int) *pb.TxnRequest {
	r := &pb.TxnRequest{}
	for range rapid.IntRange(0, 3).Draw(t, "compares") {
		r.Compare = append(r.Compare, genCompare(t))
	}
	r.Success, r.Failure = genOps(t, depth), genOps(t, depth)
	return r
}

func genRequest(t *rapid.T) proto.Message {
	switch rapid.IntRange(0, 3).Draw(t, "request") {
	case 0:
		return genRange(t)
	case 1:
		return genPut(t)
	case 2:
		return genDeleteRange(t)
	}
	return genTxn(t, 0)
}

// sameFields compares the exported fields of two decoded messages,
// byte slices by content and by being nil: stricter than proto.Equal,
// which takes an empty field for an absent one.
func sameFields(a, b reflect.Value, path string) error {
	if a.Type() != b.Type() {
		return fmt.Errorf("%s: %v vs %v", path, a.Type(), b.Type())
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Errorf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
			}
			return nil
		}
		return sameFields(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() {
				if err := sameFields(a.Field(i), b.Field(i), path+"."+f.Name); err != nil {
					return err
				}
			}
		}
		return nil
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return fmt.Errorf("%s: nil %v len %d vs nil %v len %d", path, a.IsNil(), a.Len(), b.IsNil(), b.Len())
		}
		if a.Type().Elem().Kind() == reflect.Uint8 {
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				return fmt.Errorf("%s: %q vs %q", path, a.Bytes(), b.Bytes())
			}
			return nil
		}
		for i := range a.Len() {
			if err := sameFields(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if !a.Equal(b) {
		return fmt.Errorf("%s: %v vs %v", path, a, b)
	}
	return nil
}

// checkDecode decodes b both ways: whenever decodeRequest takes it, the
// message equals protobuf's, and protobuf must have taken it too.
func checkDecode(t *rapid.T, b []byte, like proto.Message) bool {
	want := like.ProtoReflect().Type().New().Interface()
	werr := proto.Unmarshal(b, want)
	got := like.ProtoReflect().Type().New().Interface()
	if !decodeRequest(bytes.Clone(b), got) {
		return false
	}
	if werr != nil {
		t.Fatalf("decoded %x, which protobuf refuses: %v", b, werr)
	}
	if err := sameFields(reflect.ValueOf(got), reflect.ValueOf(want), "msg"); err != nil {
		t.Fatalf("%x: %v\ngot  %v\nwant %v", b, err, got, want)
	}
	return true
}

func TestDecodeRequestEqualsProtobuf(t *testing.T) {
	t.Run("every request protobuf encodes is decoded, as protobuf does", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			m := genRequest(t)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if !checkDecode(t, b, m) {
				t.Fatalf("%v (%x) left to protobuf", m, b)
			}
		})
	})
	t.Run("altered encodings are decoded as protobuf does, or left to it", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			m := genRequest(t)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			switch rapid.IntRange(0, 3).Draw(t, "alter") {
			case 0: // a byte changed
				if len(b) > 0 {
					b[rapid.IntRange(0, len(b)-1).Draw(t, "at")] = rapid.Byte().Draw(t, "to")
				}
			case 1: // cut short
				b = b[:rapid.IntRange(0, len(b)).Draw(t, "len")]
			case 2: // the same message twice: fields repeated, merged
				b = append(b, b...)
			case 3: // another message's fields after it
				o, _ := proto.Marshal(genRequest(t))
				b = append(b, o...)
			}
			checkDecode(t, b, m)
		})
	})
}

func TestRequestSizeEqualsProtobuf(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genRequest(t)
		if rapid.Bool().Draw(t, "decoded") {
			// Through protobuf from an altered encoding: unknown fields,
			// merged messages.
			b, _ := proto.Marshal(m)
			o, _ := proto.Marshal(genRequest(t))
			b = append(b, o...)
			if len(b) > 0 && rapid.Bool().Draw(t, "alter") {
				b[rapid.IntRange(0, len(b)-1).Draw(t, "at")] = rapid.Byte().Draw(t, "to")
			}
			d := m.ProtoReflect().Type().New().Interface()
			if proto.Unmarshal(b, d) != nil {
				return
			}
			m = d
		}
		if got, want := requestSize(m), proto.Size(m); got != want {
			t.Fatalf("%v: requestSize %d, proto.Size %d", m, got, want)
		}
	})
}

func TestDecodeRequestCapsByteFields(t *testing.T) {
	b, _ := proto.Marshal(&pb.PutRequest{Key: []byte("key"), Value: []byte("value")})
	m := &pb.PutRequest{}
	if !decodeRequest(b, m) {
		t.Fatal("not decoded")
	}
	_ = append(m.Key, 'X')
	if string(m.Value) != "value" {
		t.Fatalf("an append to the key changed the value: %q", m.Value)
	}
}

// BenchmarkDecodeTxn decodes and sizes a Kubernetes create (Txn If
// ModRevision==0 Then Put Else Get, 512-byte value) as the server did
// (gRPC's proto codec, proto.Size) and as it does now.
func BenchmarkDecodeTxn(b *testing.B) {
	key := []byte("/registry/pods/ns/pod-00000001")
	raw, _ := proto.Marshal(&pb.TxnRequest{
		Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: bytes.Repeat([]byte("v"), 512)}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(raw, &pb.TxnRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !decodeRequest(bytes.Clone(raw), &pb.TxnRequest{}) {
				b.Fatal("not decoded")
			}
		}
	})
	m := &pb.TxnRequest{}
	if !decodeRequest(raw, m) {
		b.Fatal("not decoded")
	}
	b.Run("proto.Size", func(b *testing.B) {
		for b.Loop() {
			proto.Size(m)
		}
	})
	b.Run("requestSize", func(b *testing.B) {
		for b.Loop() {
			requestSize(m)
		}
	})
}
