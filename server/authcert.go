package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// tlsState is a connection that knows its TLS state: a *tls.Conn, or
// one the client listener wrapped after sniffing it (package embed).
type tlsState interface {
	ConnectionState() tls.ConnectionState
}

// terminatedTLS are gRPC transport credentials for listeners whose TLS is
// ended before gRPC (a tls.Listener): they report the connection's TLS
// state, so a call can take its client certificate's CommonName as its
// user, and with count wrap it as countingCreds do (a read's memory).
type terminatedTLS struct{ count bool }

type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

func (t terminatedTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc, ok := c.(*tls.Conn); ok {
		// A tls.Listener's connection shakes hands on its first read;
		// the certificate is needed now (gRPC bounds this by its
		// connection timeout).
		if err := tc.Handshake(); err != nil {
			return nil, nil, err
		}
	}
	var state *tls.ConnectionState
	if tc, ok := c.(tlsState); ok {
		st := tc.ConnectionState()
		state = &st
	}
	if t.count {
		cc, info, err := countingCreds{}.ServerHandshake(c)
		if ci, ok := info.(countingInfo); ok {
			ci.tls = state
			info = ci
		}
		return cc, info, err
	}
	if state != nil {
		return c, credentials.TLSInfo{State: *state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (terminatedTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("axon: server-side credentials only")
}

func (terminatedTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (t terminatedTLS) Clone() credentials.TransportCredentials { return t }

func (terminatedTLS) OverrideServerName(string) error { return nil }

// certUser is the CommonName of the client certificate a call came with
// (verified against the trusted CA), as etcd takes it with
// --client-cert-auth; "" if none.
func certUser(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	var state *tls.ConnectionState
	switch info := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		state = &info.State
	case countingInfo:
		state = info.tls
	}
	if state == nil {
		return ""
	}
	for _, chain := range state.VerifiedChains {
		if len(chain) > 0 {
			return chain[0].Subject.CommonName
		}
	}
	return ""
}
