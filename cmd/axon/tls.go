package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"
)

// tlsFlags are etcd's TLS flags of one side, clients or peers. They are
// turned into etcd's own transport.TLSInfo, so certificates are read
// again at every handshake (rotation without a restart), CRLs are checked
// per handshake and auto-TLS makes the same self-signed certificates as
// etcd does.
type tlsFlags struct {
	certFile, keyFile, trustedCA, crlFile string
	clientCertAuth, autoTLS               bool
}

// tlsVersions are the flags both sides share.
type tlsVersions struct {
	cipherSuites           []string
	minVersion, maxVersion string
}

func (f *tlsFlags) register(fl *pflag.FlagSet, side string) {
	prefix, who := "", "client"
	if side == "peer" {
		prefix, who = "peer-", "peer"
	}
	fl.StringVar(&f.certFile, prefix+"cert-file", "", "certificate of the https "+who+" listener (PEM); also this instance's certificate when it dials "+who+"s")
	fl.StringVar(&f.keyFile, prefix+"key-file", "", "key of --"+prefix+"cert-file (PEM)")
	fl.StringVar(&f.trustedCA, prefix+"trusted-ca-file", "", "CA bundle that "+who+" certificates must chain to (PEM)")
	fl.BoolVar(&f.clientCertAuth, prefix+"client-cert-auth", false, "require a "+who+" certificate signed by --"+prefix+"trusted-ca-file")
	fl.StringVar(&f.crlFile, who+"-crl-file", "", "certificate revocation list (DER): "+who+" certificates it names are refused (read at every handshake)")
	fl.BoolVar(&f.autoTLS, prefix+"auto-tls", false, "serve https "+who+" URLs with a generated self-signed certificate when no --"+prefix+"cert-file is given")
}

func (v *tlsVersions) register(fl *pflag.FlagSet) {
	fl.StringSliceVar(&v.cipherSuites, "cipher-suites", nil, "TLS cipher suites for clients and peers, comma-separated (Go's names; empty: Go's defaults)")
	fl.StringVar(&v.minVersion, "tls-min-version", string(tlsutil.TLSVersion12), "lowest TLS version accepted: TLS1.2 or TLS1.3")
	fl.StringVar(&v.maxVersion, "tls-max-version", string(tlsutil.TLSVersionDefault), "highest TLS version accepted: TLS1.2 or TLS1.3 (empty: Go's highest)")
}

// errNoCert: an https URL was given without a certificate.
var errNoCert = errors.New("an https URL needs --cert-file and --key-file (or --auto-tls)")

// info returns the TLS settings of side, generating a self-signed
// certificate under dataDir/fixtures/side for auto-TLS, as etcd does.
// hosts are the listener URLs the certificate is for.
func (f tlsFlags) info(side, dataDir string, hosts []string, v tlsVersions) (transport.TLSInfo, error) {
	info := transport.TLSInfo{CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.trustedCA,
		ClientCertAuth: f.clientCertAuth, CRLFile: f.crlFile, Logger: zap.NewNop()}
	if info.Empty() && f.autoTLS {
		var hostPorts []string
		for _, h := range hosts {
			u, err := url.Parse(h)
			if err != nil {
				return info, err
			}
			hostPorts = append(hostPorts, u.Host)
		}
		var err error
		// One year, etcd's default --self-signed-cert-validity.
		info, err = transport.SelfCert(zap.NewNop(), filepath.Join(dataDir, "fixtures", side), hostPorts, 1)
		if err != nil {
			return info, fmt.Errorf("%s auto-tls: %w", side, err)
		}
		info.CRLFile = f.crlFile
	}
	if info.Empty() {
		if side == "peer" {
			return info, errors.New("an https peer URL needs --peer-cert-file and --peer-key-file (or --peer-auto-tls)")
		}
		return info, errNoCert
	}
	minV, err := tlsutil.GetTLSVersion(v.minVersion)
	if err != nil {
		return info, err
	}
	maxV, err := tlsutil.GetTLSVersion(v.maxVersion)
	if err != nil {
		return info, err
	}
	if maxV != 0 && minV > maxV {
		return info, fmt.Errorf("min version (%s) is greater than max version (%s)", v.minVersion, v.maxVersion)
	}
	if minV == tls.VersionTLS13 && len(v.cipherSuites) > 0 {
		return info, errors.New("cipher suites cannot be configured when only TLS1.3 is enabled")
	}
	if len(v.cipherSuites) > 0 {
		if info.CipherSuites, err = tlsutil.GetCipherSuites(v.cipherSuites); err != nil {
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
