package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/urls"
)

// TLSInfo is etcd's TLS settings of one side, clients or peers (the
// flags named in each field are the client side's; the peer side's
// have the peer- prefix). They are turned into etcd's own
// transport.TLSInfo, so certificates are read again at every handshake
// (rotation without a restart), CRLs are checked per handshake and
// auto-TLS makes the same self-signed certificates as etcd does.
type TLSInfo struct {
	// CertFile and KeyFile are the listener's certificate and key (PEM),
	// also this instance's when it dials that side (--cert-file,
	// --key-file).
	CertFile, KeyFile string
	// TrustedCAFile is the CA bundle the other side's certificates must
	// chain to (--trusted-ca-file).
	TrustedCAFile string
	// CRLFile is a certificate revocation list (DER), read at every
	// handshake (--client-crl-file).
	CRLFile string
	// ClientCertAuth requires a certificate signed by TrustedCAFile
	// (--client-cert-auth). On the client side, with auth on, a call
	// without a token then runs as its certificate's CommonName.
	ClientCertAuth bool
	// AutoTLS serves https URLs with a self-signed certificate kept
	// under DataDir/fixtures when no CertFile is given (--auto-tls).
	AutoTLS bool
}

// ErrNoCert: an https client or metrics URL was given without a
// certificate.
var ErrNoCert = errors.New("an https URL needs --cert-file and --key-file (or --auto-tls)")

// info returns the TLS settings of side, generating a self-signed
// certificate under dataDir/fixtures/side for auto-TLS, as etcd does.
// hosts are the listener URLs the certificate is for.
func (f TLSInfo) info(side, dataDir string, hosts []urls.URL, cfg *Config) (transport.TLSInfo, error) {
	info := transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.TrustedCAFile,
		ClientCertAuth: f.ClientCertAuth, CRLFile: f.CRLFile, Logger: zap.NewNop()}
	if info.Empty() && f.AutoTLS {
		var hostPorts []string
		for _, u := range hosts {
			hostPorts = append(hostPorts, u.Host())
		}
		var err error
		// One year, etcd's default --self-signed-cert-validity.
		info, err = transport.SelfCert(zap.NewNop(), filepath.Join(dataDir, "fixtures", side), hostPorts, 1)
		if err != nil {
			return info, fmt.Errorf("%s auto-tls: %w", side, err)
		}
		info.CRLFile = f.CRLFile
	}
	if info.Empty() {
		if side == "peer" {
			return info, errors.New("an https peer URL needs --peer-cert-file and --peer-key-file (or --peer-auto-tls)")
		}
		return info, ErrNoCert
	}
	minV, err := tlsutil.GetTLSVersion(cfg.TLSMinVersion)
	if err != nil {
		return info, err
	}
	maxV, err := tlsutil.GetTLSVersion(cfg.TLSMaxVersion)
	if err != nil {
		return info, err
	}
	if maxV != 0 && minV > maxV {
		return info, fmt.Errorf("min version (%s) is greater than max version (%s)", cfg.TLSMinVersion, cfg.TLSMaxVersion)
	}
	if minV == tls.VersionTLS13 && len(cfg.CipherSuites) > 0 {
		return info, errors.New("cipher suites cannot be configured when only TLS1.3 is enabled")
	}
	if len(cfg.CipherSuites) > 0 {
		if info.CipherSuites, err = tlsutil.GetCipherSuites(cfg.CipherSuites); err != nil {
			return info, err
		}
	}
	info.MinVersion, info.MaxVersion = minV, maxV
	return info, nil
}

// serverTLS is the listener side of info: client certificates verified
// against the trusted CA (required with client-cert-auth, as etcd), the
// CRL checked at every handshake. ALPN offers HTTP/1.1 besides h2 so that
// JSON gateway clients get in on the same port as gRPC.
func serverTLS(info transport.TLSInfo) (*tls.Config, error) {
	cfg, err := info.ServerConfig()
	if err != nil {
		return nil, err
	}
	info.ConfigureCRLVerification(cfg)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return cfg, nil
}

// clientTLS is the dialing side of info, for instances that forward to
// each other: the certificate is this instance's, the trusted CA the
// one a leader's certificate must chain to (auto-TLS skips the check,
// as etcd's peers do).
func clientTLS(info transport.TLSInfo) (*tls.Config, error) {
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, err
	}
	info.ConfigureCRLVerification(cfg)
	return cfg, nil
}

// listening is the TLS of each kind of listener (nil: plaintext) and of
// this instance's calls to the others.
type listening struct {
	client, peer, dial *tls.Config
}

// listenTLS makes the TLS configurations the URLs need: https client or
// metrics URLs take the client settings, https peer URLs the peer
// settings. Instances dial each other with the peer settings, or,
// without peer URLs, at the client URLs with the client settings.
func (cfg *Config) listenTLS(us listenURLs) (listening, error) {
	var l listening
	if urls.AnySecure(us.client) || urls.AnySecure(us.metrics) {
		info, err := cfg.ClientTLS.info("client", cfg.DataDir, us.client, cfg)
		if err != nil {
			return l, err
		}
		if l.client, err = serverTLS(info); err != nil {
			return l, err
		}
		if len(us.peer) == 0 && urls.AnySecure(us.client) {
			if l.dial, err = clientTLS(info); err != nil {
				return l, err
			}
		}
	}
	if urls.AnySecure(us.peer) {
		info, err := cfg.PeerTLS.info("peer", cfg.DataDir, us.peer, cfg)
		if err != nil {
			return l, err
		}
		if l.peer, err = serverTLS(info); err != nil {
			return l, err
		}
		if l.dial, err = clientTLS(info); err != nil {
			return l, err
		}
	}
	return l, nil
}

// checkPeerURLs refuses peer listeners that would take callers without
// a peer certificate while clients must show one (--client-cert-auth):
// instances' calls carry the users they vouch for and clients' tokens,
// which such a set-up asks to keep off an unauthenticated, perhaps
// plaintext, link. (The peer listener serves nothing but proved calls of
// instances either way.)
func (cfg *Config) checkPeerURLs(peer []urls.URL) error {
	if !cfg.ClientTLS.ClientCertAuth {
		return nil
	}
	for _, u := range peer {
		if !u.Secure() {
			return fmt.Errorf("--client-cert-auth with --listen-peer-urls %s: a plain peer URL takes instances without a certificate; use an https peer URL with --peer-client-cert-auth and --peer-trusted-ca-file", u)
		}
		if !cfg.PeerTLS.ClientCertAuth {
			return fmt.Errorf("--client-cert-auth with --listen-peer-urls %s but without --peer-client-cert-auth: the peer listener would take instances without a certificate; add --peer-client-cert-auth and --peer-trusted-ca-file", u)
		}
	}
	return nil
}

// checkCertAuth refuses a side that requires certificates without a CA
// to check them against: Go would take any certificate the system's
// roots sign, a public CA's included.
func (cfg *Config) checkCertAuth() error {
	if cfg.ClientTLS.ClientCertAuth && cfg.ClientTLS.TrustedCAFile == "" {
		return errors.New("--client-cert-auth without --trusted-ca-file: client certificates would be checked against the system's CAs; give --trusted-ca-file")
	}
	if cfg.PeerTLS.ClientCertAuth && cfg.PeerTLS.TrustedCAFile == "" {
		return errors.New("--peer-client-cert-auth without --peer-trusted-ca-file: peer certificates would be checked against the system's CAs; give --peer-trusted-ca-file")
	}
	return nil
}
