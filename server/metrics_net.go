package server

import (
	"context"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The network's families: bytes of client gRPC messages, and the calls
// between instances (etcd's peer families).

// countingCodec is gRPC's proto codec counting the bytes of the messages
// it encodes and decodes, as etcd's codec does, on the port clients and
// peers share. It adds no allocation (a stats handler would, per event).
type countingCodec struct {
	encoding.CodecV2
	e *etcdMetrics
}

func newCountingCodec(e *etcdMetrics) countingCodec {
	return countingCodec{CodecV2: encoding.GetCodecV2(protocodec.Name), e: e}
}

func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.CodecV2.Marshal(v)
	if err == nil {
		c.e.sentBytes.Add(float64(out.Len()))
	}
	return out, err
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.e.receivedBytes.Add(float64(data.Len()))
	switch v.(type) {
	case *pb.TxnRequest, *pb.PutRequest, *pb.RangeRequest, *pb.DeleteRangeRequest:
		// One copy (gRPC reuses data's buffers), which the request's
		// keys and values then point into.
		b := data.Materialize()
		if decodeRequest(b, v) {
			return nil
		}
		m := v.(proto.Message)
		proto.Reset(m)
		return proto.Unmarshal(b, m)
	}
	return c.CodecV2.Unmarshal(data, v)
}

// peerUnary times the calls to another instance (To: its host:port).
// Round trips are those of ReadIndex and Nudge, which the leader answers
// from memory: a forwarded write's time is the write's, not the
// network's. Every call that fails to reach the peer is a send failure.
func (e *etcdMetrics) peerUnary(addr string) grpc.UnaryClientInterceptor {
	rtt, failures := e.peerRTT.WithLabelValues(addr), e.peerFailures.WithLabelValues(addr)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if unreached(err) {
			failures.Inc()
		} else if err == nil && strings.HasPrefix(method, "/"+peerService+"/") {
			rtt.Observe(time.Since(start).Seconds())
		}
		return err
	}
}

// peerStream counts the streams to another instance that fail to open.
func (e *etcdMetrics) peerStream(addr string) grpc.StreamClientInterceptor {
	failures := e.peerFailures.WithLabelValues(addr)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if unreached(err) {
			failures.Inc()
		}
		return cs, err
	}
}

// unreached reports whether a call failed on its way to the peer.
func unreached(err error) bool { return err != nil && codeOf(err) == codes.Unavailable }
