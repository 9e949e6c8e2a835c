package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/axon-kv/axon/internal/urls"
)

// listenURLs are a Config's URL flags, parsed once (urls.Parse: etcd's
// rules); nothing else reads the strings.
type listenURLs struct {
	client, advClient, peer, advPeer, metrics []urls.URL
}

// urls parses the URL flags; an error names the flag and the value.
func (cfg *Config) urls() (listenURLs, error) {
	var l listenURLs
	for _, f := range []struct {
		flag string
		in   []string
		out  *[]urls.URL
	}{
		{"listen-client-urls", cfg.ListenClientURLs, &l.client},
		{"advertise-client-urls", cfg.AdvertiseClientURLs, &l.advClient},
		{"listen-peer-urls", cfg.ListenPeerURLs, &l.peer},
		{"initial-advertise-peer-urls", cfg.AdvertisePeerURLs, &l.advPeer},
		{"listen-metrics-urls", cfg.ListenMetricsURLs, &l.metrics},
	} {
		var err error
		if *f.out, err = urls.ParseFlag(f.flag, f.in); err != nil {
			return l, err
		}
	}
	return l, nil
}

// listenAll listens on every URL; the secure ones (urls.URL.Secure) hand
// out TLS connections with cfg (the handshake runs in the connection's
// own goroutine).
func listenAll(us []urls.URL, cfg *tls.Config) ([]net.Listener, error) {
	var out []net.Listener
	for _, u := range us {
		lis, err := listen(u)
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, err
		}
		if u.Secure() {
			lis = tls.NewListener(lis, cfg)
		}
		out = append(out, lis)
	}
	return out, nil
}

// listen binds u's address. A unix socket left by an instance that did
// not close it is removed first, as etcd does; any other file in its
// place is an error.
func listen(u urls.URL) (net.Listener, error) {
	if u.Unix() {
		if fi, err := os.Lstat(u.Addr()); err == nil {
			if fi.Mode().Type() != fs.ModeSocket {
				return nil, fmt.Errorf("listen %s: %s exists and is not a socket", u, u.Addr())
			}
			if err := os.Remove(u.Addr()); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return net.Listen(u.Network(), u.Addr())
}

// bound is the URLs as strings, with the port the system chose in place
// of each port 0.
func bound(us []urls.URL, lis []net.Listener) []string {
	out := make([]string, len(us))
	for i, u := range us {
		if i < len(lis) && u.Port() == "0" {
			if _, got, err := net.SplitHostPort(lis[i].Addr().String()); err == nil {
				u = u.WithPort(got)
			}
		}
		out[i] = u.String()
	}
	return out
}
