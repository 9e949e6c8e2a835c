// Package urls parses the URLs of Axon's listen and advertise flags
// (client, peer, metrics) with etcd's rules, once, into one type, so that
// whether a listener speaks TLS is decided in one place (URL.Secure) from
// the parsed scheme, never from the string.
package urls

import (
	"fmt"
	"net"
	"net/url"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// URL is one listen or advertise URL as etcd accepts it: http or https
// with a host:port and no path, or a unix socket, plain (unix) or TLS
// (unixs). The scheme is lower-case whatever case it was given in.
type URL struct {
	u url.URL
}

// Parse parses s with etcd's rules (types.NewURLs): a URL without a
// scheme, with another scheme, an http(s) URL without a port or with a
// path are refused with etcd's own messages.
func Parse(s string) (URL, error) {
	us, err := types.NewURLs([]string{s})
	if err != nil {
		return URL{}, err
	}
	return URL{u: us[0]}, nil
}

// ParseFlag parses every URL of a flag, in order; an error names the flag
// and the value as etcd's flag parsing does.
func ParseFlag(flag string, values []string) ([]URL, error) {
	out := make([]URL, 0, len(values))
	for _, v := range values {
		u, err := Parse(v)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for flag --%s: %w", v, flag, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// Secure reports whether a listener on u speaks TLS: https and unixs do.
// It is the one place that decides.
func (u URL) Secure() bool { return u.u.Scheme == "https" || u.u.Scheme == "unixs" }

// Unix reports whether u names a unix socket.
func (u URL) Unix() bool { return u.u.Scheme == "unix" || u.u.Scheme == "unixs" }

// Network is the network to listen on or dial: tcp or unix.
func (u URL) Network() string {
	if u.Unix() {
		return "unix"
	}
	return "tcp"
}

// Addr is the host:port of an http(s) URL, or the path of a unix
// socket: its host and path joined, as etcd's client listeners take
// them (unix://name is the file name in the working directory,
// unix:///run/axon.sock an absolute path).
func (u URL) Addr() string {
	if u.Unix() {
		return u.u.Host + u.u.Path
	}
	return u.u.Host
}

// Host is the URL's host:port (for a unix socket, the host part of its
// name), as a certificate for it names it.
func (u URL) Host() string { return u.u.Host }

// Target is the gRPC dial target of u: its host:port, or unix:PATH.
func (u URL) Target() string {
	if u.Unix() {
		return "unix:" + u.Addr()
	}
	return u.u.Host
}

// Port is the port of an http(s) URL ("" for a unix socket).
func (u URL) Port() string {
	if u.Unix() {
		return ""
	}
	_, port, _ := net.SplitHostPort(u.u.Host)
	return port
}

// WithPort returns u with its port replaced by port (a tcp URL whose
// port the system chose); a unix URL is returned as it is.
func (u URL) WithPort(port string) URL {
	if u.Unix() {
		return u
	}
	host, _, err := net.SplitHostPort(u.u.Host)
	if err != nil {
		return u
	}
	u.u.Host = net.JoinHostPort(host, port)
	return u
}

// String is u with its scheme in lower case.
func (u URL) String() string { return u.u.String() }

// Strings is the String of each URL.
func Strings(us []URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return out
}

// AnySecure reports whether any of us speaks TLS.
func AnySecure(us []URL) bool {
	for _, u := range us {
		if u.Secure() {
			return true
		}
	}
	return false
}

// Scheme is u's scheme, in lower case.
func (u URL) Scheme() string { return u.u.Scheme }
