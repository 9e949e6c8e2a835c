package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The write requests' decoder. gRPC's proto codec decodes a TxnRequest
// through protobuf-go's generic oneof handling (reflection for every
// RequestOp and Compare) and copies every key and value on its own: 4-5 %
// of the server's CPU per create. decodeRequest decodes the KV requests
// (Range, Put, DeleteRange, Txn) field by field, with their byte fields
// pointing into one copy of the message. Anything it does not expect —
// an unknown field, a wire type other than the schema's, a oneof or a
// message field given twice (protobuf merges those), nesting deeper than
// maxTxnDepth — makes it give up, and the caller decodes with protobuf
// instead, so the messages it returns are exactly protobuf's. Kept over
// protobuf's decoder for BenchmarkDecodeTxn, which decodes a Kubernetes
// create both ways.

// maxTxnDepth bounds the nested txns decodeRequest follows; deeper
// requests are left to protobuf (etcd refuses them anyway, by their
// operation count).
const maxTxnDepth = 32

// decodeRequest decodes b into m, one of the KV requests, and reports
// whether it could; m is then protobuf's decoding of b. m must be empty;
// on false it may hold part of b. Byte fields alias b.
func decodeRequest(b []byte, m any) bool {
	switch m := m.(type) {
	case *pb.TxnRequest:
		return decodeTxn(b, m, 0)
	case *pb.PutRequest:
		return decodePut(b, m)
	case *pb.RangeRequest:
		return decodeRange(b, m)
	case *pb.DeleteRangeRequest:
		return decodeDeleteRange(b, m)
	}
	return false
}

// field is one field of a message: its number, and its value (varint)
// or contents (bytes), by wire type.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	varint uint64
	bytes  []byte
}

// nextField consumes the first field of b; ok is false at the end of b
// and on a malformed field or a wire type other than varint or bytes.
func nextField(b []byte) (f field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return f, nil, false
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.varint, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(b)
		// Capped, so that an append to one field cannot write over the
		// next.
		f.bytes = f.bytes[:len(f.bytes):len(f.bytes)]
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, b[n:], true
}

// eachField calls fn with each field of the message b until fn returns
// false; it reports whether every field was well formed and taken.
func eachField(b []byte, fn func(f field) bool) bool {
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok || !fn(f) {
			return false
		}
		b = rest
	}
	return true
}

// noZero is a proto3 bytes field as protobuf decodes it: nil when empty.
func noZero(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func decodeTxn(b []byte, m *pb.TxnRequest, depth int) bool {
	if depth > maxTxnDepth {
		return false
	}
	return eachField(b, func(f field) bool {
		if f.typ != protowire.BytesType {
			return false
		}
		switch f.num {
		case 1:
			c := &pb.Compare{}
			if !decodeCompare(f.bytes, c) {
				return false
			}
			m.Compare = append(m.Compare, c)
		case 2, 3:
			op := &pb.RequestOp{}
			if !decodeOp(f.bytes, op, depth) {
				return false
			}
			if f.num == 2 {
				m.Success = append(m.Success, op)
			} else {
				m.Failure = append(m.Failure, op)
			}
		default:
			return false
		}
		return true
	})
}

func decodeOp(b []byte, m *pb.RequestOp, depth int) bool {
	return eachField(b, func(f field) bool {
		if f.typ != protowire.BytesType || m.Request != nil {
			return false
		}
		switch f.num {
		case 1:
			r := &pb.RangeRequest{}
			m.Request = &pb.RequestOp_RequestRange{RequestRange: r}
			return decodeRange(f.bytes, r)
		case 2:
			r := &pb.PutRequest{}
			m.Request = &pb.RequestOp_RequestPut{RequestPut: r}
			return decodePut(f.bytes, r)
		case 3:
			r := &pb.DeleteRangeRequest{}
			m.Request = &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}
			return decodeDeleteRange(f.bytes, r)
		case 4:
			r := &pb.TxnRequest{}
			m.Request = &pb.RequestOp_RequestTxn{RequestTxn: r}
			return decodeTxn(f.bytes, r, depth+1)
		}
		return false
	})
}

func decodeCompare(b []byte, m *pb.Compare) bool {
	return eachField(b, func(f field) bool {
		isVarint := f.typ == protowire.VarintType
		switch {
		case f.num == 1 && isVarint:
			m.Result = pb.Compare_CompareResult(int32(f.varint))
		case f.num == 2 && isVarint:
			m.Target = pb.Compare_CompareTarget(int32(f.varint))
		case f.num == 3 && !isVarint:
			m.Key = noZero(f.bytes)
		case f.num == 64 && !isVarint:
			m.RangeEnd = noZero(f.bytes)
		case m.TargetUnion != nil:
			return false // a second member of the oneof, or an unknown field
		case f.num == 4 && isVarint:
			m.TargetUnion = &pb.Compare_Version{Version: int64(f.varint)}
		case f.num == 5 && isVarint:
			m.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(f.varint)}
		case f.num == 6 && isVarint:
			m.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(f.varint)}
		case f.num == 7 && !isVarint:
			v := f.bytes
			if v == nil {
				v = []byte{} // a oneof's bytes are never nil once set
			}
			m.TargetUnion = &pb.Compare_Value{Value: v}
		case f.num == 8 && isVarint:
			m.TargetUnion = &pb.Compare_Lease{Lease: int64(f.varint)}
		default:
			return false
		}
		return true
	})
}

func decodePut(b []byte, m *pb.PutRequest) bool {
	return eachField(b, func(f field) bool {
		isVarint := f.typ == protowire.VarintType
		switch {
		case f.num == 1 && !isVarint:
			m.Key = noZero(f.bytes)
		case f.num == 2 && !isVarint:
			m.Value = noZero(f.bytes)
		case f.num == 3 && isVarint:
			m.Lease = int64(f.varint)
		case f.num == 4 && isVarint:
			m.PrevKv = f.varint != 0
		case f.num == 5 && isVarint:
			m.IgnoreValue = f.varint != 0
		case f.num == 6 && isVarint:
			m.IgnoreLease = f.varint != 0
		default:
			return false
		}
		return true
	})
}

func decodeRange(b []byte, m *pb.RangeRequest) bool {
	return eachField(b, func(f field) bool {
		if f.typ == protowire.BytesType {
			switch f.num {
			case 1:
				m.Key = noZero(f.bytes)
			case 2:
				m.RangeEnd = noZero(f.bytes)
			default:
				return false
			}
			return true
		}
		v := f.varint
		switch f.num {
		case 3:
			m.Limit = int64(v)
		case 4:
			m.Revision = int64(v)
		case 5:
			m.SortOrder = pb.RangeRequest_SortOrder(int32(v))
		case 6:
			m.SortTarget = pb.RangeRequest_SortTarget(int32(v))
		case 7:
			m.Serializable = v != 0
		case 8:
			m.KeysOnly = v != 0
		case 9:
			m.CountOnly = v != 0
		case 10:
			m.MinModRevision = int64(v)
		case 11:
			m.MaxModRevision = int64(v)
		case 12:
			m.MinCreateRevision = int64(v)
		case 13:
			m.MaxCreateRevision = int64(v)
		default:
			return false
		}
		return true
	})
}

func decodeDeleteRange(b []byte, m *pb.DeleteRangeRequest) bool {
	return eachField(b, func(f field) bool {
		isVarint := f.typ == protowire.VarintType
		switch {
		case f.num == 1 && !isVarint:
			m.Key = noZero(f.bytes)
		case f.num == 2 && !isVarint:
			m.RangeEnd = noZero(f.bytes)
		case f.num == 3 && isVarint:
			m.PrevKv = f.varint != 0
		default:
			return false
		}
		return true
	})
}

// requestSize is proto.Size(m), what a write request is held to against
// MaxRequestBytes. protobuf sizes a TxnRequest through the same generic
// oneof path as it decodes one (1.5 % of a create's CPU); the KV
// requests are summed here field by field instead, unless they hold
// unknown fields or a nil message protobuf would size its own way.
func requestSize(m proto.Message) int {
	var n int
	ok := false
	switch m := m.(type) {
	case *pb.TxnRequest:
		n, ok = txnSize(m)
	case *pb.PutRequest:
		n, ok = putSize(m)
	case *pb.DeleteRangeRequest:
		n, ok = deleteRangeSize(m)
	case *pb.RangeRequest:
		n, ok = rangeSize(m)
	}
	if !ok {
		return proto.Size(m)
	}
	return n
}

// known reports whether m holds no unknown fields.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

func bytesSize(num protowire.Number, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(b))
}

func varintSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func boolSize(num protowire.Number, b bool) int {
	if !b {
		return 0
	}
	return protowire.SizeTag(num) + 1
}

// messageSize is the size of an embedded message of size n.
func messageSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func txnSize(m *pb.TxnRequest) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	n := 0
	for _, c := range m.Compare {
		cn, ok := compareSize(c)
		if !ok {
			return 0, false
		}
		n += messageSize(1, cn)
	}
	for i, ops := range [][]*pb.RequestOp{m.Success, m.Failure} {
		for _, op := range ops {
			on, ok := opSize(op)
			if !ok {
				return 0, false
			}
			n += messageSize(protowire.Number(2+i), on)
		}
	}
	return n, true
}

func opSize(m *pb.RequestOp) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	var (
		num protowire.Number
		n   int
		ok  bool
	)
	switch r := m.Request.(type) {
	case nil:
		return 0, true
	case *pb.RequestOp_RequestRange:
		if r != nil {
			num = 1
			n, ok = rangeSize(r.RequestRange)
		}
	case *pb.RequestOp_RequestPut:
		if r != nil {
			num = 2
			n, ok = putSize(r.RequestPut)
		}
	case *pb.RequestOp_RequestDeleteRange:
		if r != nil {
			num = 3
			n, ok = deleteRangeSize(r.RequestDeleteRange)
		}
	case *pb.RequestOp_RequestTxn:
		if r != nil {
			num = 4
			n, ok = txnSize(r.RequestTxn)
		}
	}
	if !ok {
		return 0, false
	}
	return messageSize(num, n), true
}

func compareSize(m *pb.Compare) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	n := varintSize(1, uint64(m.Result)) + varintSize(2, uint64(m.Target)) + bytesSize(3, m.Key) + bytesSize(64, m.RangeEnd)
	// A oneof member set is sized even when zero; a nil one is
	// protobuf's to size.
	switch u := m.TargetUnion.(type) {
	case nil:
	case *pb.Compare_Version:
		if u == nil {
			return 0, false
		}
		n += protowire.SizeTag(4) + protowire.SizeVarint(uint64(u.Version))
	case *pb.Compare_CreateRevision:
		if u == nil {
			return 0, false
		}
		n += protowire.SizeTag(5) + protowire.SizeVarint(uint64(u.CreateRevision))
	case *pb.Compare_ModRevision:
		if u == nil {
			return 0, false
		}
		n += protowire.SizeTag(6) + protowire.SizeVarint(uint64(u.ModRevision))
	case *pb.Compare_Value:
		if u == nil {
			return 0, false
		}
		n += protowire.SizeTag(7) + protowire.SizeBytes(len(u.Value))
	case *pb.Compare_Lease:
		if u == nil {
			return 0, false
		}
		n += protowire.SizeTag(8) + protowire.SizeVarint(uint64(u.Lease))
	default:
		return 0, false
	}
	return n, true
}

func putSize(m *pb.PutRequest) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	return bytesSize(1, m.Key) + bytesSize(2, m.Value) + varintSize(3, uint64(m.Lease)) +
		boolSize(4, m.PrevKv) + boolSize(5, m.IgnoreValue) + boolSize(6, m.IgnoreLease), true
}

func deleteRangeSize(m *pb.DeleteRangeRequest) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	return bytesSize(1, m.Key) + bytesSize(2, m.RangeEnd) + boolSize(3, m.PrevKv), true
}

func rangeSize(m *pb.RangeRequest) (int, bool) {
	if m == nil || !known(m) {
		return 0, false
	}
	return bytesSize(1, m.Key) + bytesSize(2, m.RangeEnd) + varintSize(3, uint64(m.Limit)) + varintSize(4, uint64(m.Revision)) +
		varintSize(5, uint64(m.SortOrder)) + varintSize(6, uint64(m.SortTarget)) +
		boolSize(7, m.Serializable) + boolSize(8, m.KeysOnly) + boolSize(9, m.CountOnly) +
		varintSize(10, uint64(m.MinModRevision)) + varintSize(11, uint64(m.MaxModRevision)) +
		varintSize(12, uint64(m.MinCreateRevision)) + varintSize(13, uint64(m.MaxCreateRevision)), true
}
