package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// tlsFlags are etcd's client TLS flags.
type tlsFlags struct {
	certFile, keyFile, trustedCA string
	clientCertAuth               bool
}

// errNoCert: an https URL was given without a certificate.
var errNoCert = errors.New("an https client URL needs --cert-file and --key-file")

// config returns the TLS configuration of the client listener. The
// certificate, key and CA bundle are read again at the next handshake
// whenever a file changes, so they rotate without a restart (etcd
// reloads per handshake too).
func (f tlsFlags) config() (*tls.Config, error) {
	if f.certFile == "" || f.keyFile == "" {
		return nil, errNoCert
	}
	r := &tlsFiles{f: f}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st, err := r.load()
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{st.cert}, ClientCAs: st.pool, NextProtos: []string{"h2"}}
			switch {
			case f.clientCertAuth:
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			case st.pool != nil:
				cfg.ClientAuth = tls.VerifyClientCertIfGiven
			}
			return cfg, nil
		},
	}, nil
}

// tlsFiles caches what the TLS files held, by their modification times.
type tlsFiles struct {
	f     tlsFlags
	mu    sync.Mutex
	stamp [3]time.Time
	st    tlsState
}

type tlsState struct {
	cert tls.Certificate
	pool *x509.CertPool
}

func (r *tlsFiles) load() (tlsState, error) {
	var stamp [3]time.Time
	for i, name := range []string{r.f.certFile, r.f.keyFile, r.f.trustedCA} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return tlsState{}, fmt.Errorf("tls: %w", err)
		}
		stamp[i] = fi.ModTime()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if stamp == r.stamp && r.st.cert.Certificate != nil {
		return r.st, nil
	}
	cert, err := tls.LoadX509KeyPair(r.f.certFile, r.f.keyFile)
	if err != nil {
		return tlsState{}, fmt.Errorf("tls: --cert-file/--key-file: %w", err)
	}
	st := tlsState{cert: cert}
	if r.f.trustedCA != "" {
		pem, err := os.ReadFile(r.f.trustedCA)
		if err != nil {
			return tlsState{}, fmt.Errorf("tls: --trusted-ca-file: %w", err)
		}
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(pem) {
			return tlsState{}, fmt.Errorf("tls: --trusted-ca-file %s: no certificate", r.f.trustedCA)
		}
	}
	r.stamp, r.st = stamp, st
	return st, nil
}
