package embed

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/soheilhy/cmux"
	"github.com/tmc/grpc-websocket-proxy/wsproxy"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/axon-kv/axon/server"
)

// loopback is an in-memory connection to the gRPC server for the JSON
// gateway, which calls the same services a client does, without a
// socket or a TLS handshake.
type loopback struct {
	lis  *bufconn.Listener
	conn *grpc.ClientConn
}

func newLoopback(g *grpc.Server) (*loopback, error) {
	lis := bufconn.Listen(1 << 20)
	go g.Serve(lis) // returns once g stops
	conn, err := grpc.NewClient("passthrough:///axon",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The gateway passes on whatever the server answers, as etcd's does.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		lis.Close()
		return nil, err
	}
	return &loopback{lis: lis, conn: conn}, nil
}

func (l *loopback) Close() {
	l.conn.Close()
	l.lis.Close()
}

// gatewayMux is etcd's HTTP/JSON gateway: etcd's generated handlers for
// KV, Watch, Lease, Cluster, Maintenance and Auth under /v3/, marshalled
// as etcd marshals them (proto field names, zero values left out), with
// WebSocket upgrades for the streams.
func gatewayMux(ctx context.Context, conn *grpc.ClientConn) (http.Handler, error) {
	mux := gw.NewServeMux(gw.WithMarshalerOption(gw.MIMEWildcard, &gw.HTTPBodyMarshaler{
		Marshaler: &gw.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	for _, register := range []func(context.Context, *gw.ServeMux, *grpc.ClientConn) error{
		etcdgw.RegisterKVHandler, etcdgw.RegisterWatchHandler, etcdgw.RegisterLeaseHandler,
		etcdgw.RegisterClusterHandler, etcdgw.RegisterMaintenanceHandler, etcdgw.RegisterAuthHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	return wsproxy.WebsocketProxy(mux,
		// A stream opened by a WebSocket is a POST to the gateway.
		wsproxy.WithRequestMutator(func(_ *http.Request, out *http.Request) *http.Request {
			out.Method = http.MethodPost
			return out
		}),
		wsproxy.WithMaxRespBodyBufferSize(math.MaxInt32)), nil
}

// clientHTTP is what the client port answers over HTTP, as etcd's does:
// the gateway under /v3/ (and /v3beta/, its old name), /version, and
// the paths of the metrics port (/health, /readyz, /livez, /metrics).
func clientHTTP(gateway http.Handler, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v3/", gateway)
	mux.HandleFunc("/version", serveVersion)
	mux.Handle("/", metrics)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3beta/") {
			r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
		}
		mux.ServeHTTP(w, r)
	})
}

// serveVersion answers /version with the versions Axon reports over
// gRPC (Maintenance.Status), in etcd's JSON.
func serveVersion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(version.Versions{Server: server.Version, Cluster: server.Version, Storage: server.Version})
	w.Write(b)
}

// serveClient serves one client listener: gRPC goes to g, HTTP/1.x and
// HTTP/2 that is not gRPC (curl over https negotiates h2) to hs. TLS, if
// any, is already off the connections, so hs takes HTTP/2 unencrypted.
func serveClient(lis net.Listener, g *grpc.Server, hs *http.Server) error {
	m := cmux.New(lis)
	httpL := m.Match(cmux.HTTP1Fast())
	// gRPC clients wait for the server's SETTINGS before their first
	// request; the matcher sends them so it can read the content-type.
	grpcL := m.MatchWithWriters(cmux.HTTP2MatchHeaderFieldPrefixSendSettings("content-type", "application/grpc"))
	h2L := m.Match(cmux.HTTP2())
	h1L := m.Match(cmux.HTTP1())
	go hs.Serve(httpL)                   // returns once lis closes
	go hs.Serve(h1L)                     // returns once lis closes
	go hs.Serve(settingsAckDropper{h2L}) // returns once lis closes
	go g.Serve(tlsStateListener{grpcL})  // returns once lis closes
	return m.Serve()
}

// tlsStateListener hands gRPC connections that report the TLS state of
// the connection cmux sniffed, so that a call can take its client
// certificate's CommonName as its user (--client-cert-auth).
type tlsStateListener struct{ net.Listener }

func (l tlsStateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if mc, ok := c.(*cmux.MuxConn); ok {
		inner := mc.Conn
		if t, ok := inner.(*trackedConn); ok {
			inner = t.Conn
		}
		if tc, ok := inner.(*tls.Conn); ok {
			return tlsStateConn{Conn: c, tls: tc}, nil
		}
	}
	return c, nil
}

// tlsStateConn is a sniffed connection with its TLS state.
type tlsStateConn struct {
	net.Conn
	tls *tls.Conn
}

func (c tlsStateConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// settingsAckDropper hands out HTTP/2 connections less the client's
// first SETTINGS acknowledgement: it acknowledges the SETTINGS the gRPC
// matcher sent, which the HTTP server did not send and would take for a
// protocol error.
type settingsAckDropper struct{ net.Listener }

func (l settingsAckDropper) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &ackDropConn{Conn: c, skip: len(http2Preface)}, nil
}

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ackDropConn passes the client's bytes through frame by frame until it
// has dropped one empty SETTINGS frame with the ACK flag.
type ackDropConn struct {
	net.Conn
	skip    int     // bytes to pass before the next frame header
	head    [9]byte // a frame header being read
	headLen int
	out     []byte // header bytes to hand out
	dropped bool
}

func (c *ackDropConn) Read(p []byte) (int, error) {
	for {
		switch {
		case len(c.out) > 0:
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		case c.dropped:
			return c.Conn.Read(p)
		case c.skip > 0:
			n, err := c.Conn.Read(p[:min(len(p), c.skip)])
			c.skip -= n
			return n, err
		}
		n, err := c.Conn.Read(c.head[c.headLen:])
		c.headLen += n
		if c.headLen < len(c.head) {
			if err != nil {
				c.out = append([]byte(nil), c.head[:c.headLen]...)
				c.headLen = 0
				if len(c.out) == 0 {
					return 0, err
				}
			}
			continue
		}
		c.headLen = 0
		length := int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
		const settings, ack = 0x4, 0x1
		if c.head[3] == settings && c.head[4]&ack != 0 && length == 0 {
			c.dropped = true
			continue
		}
		c.out, c.skip = append(c.out[:0], c.head[:]...), length
	}
}

// clientHTTPServer is the http.Server of the client listeners.
func clientHTTPServer(h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: &p, ReadHeaderTimeout: time.Minute}
}
