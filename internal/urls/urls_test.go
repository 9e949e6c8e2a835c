package urls_test

import (
	"testing"

	"github.com/axon-kv/axon/internal/urls"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in                          string
		secure                      bool
		network, addr, target, text string
		err                         string
	}{
		{in: "http://127.0.0.1:2379", network: "tcp", addr: "127.0.0.1:2379", target: "127.0.0.1:2379", text: "http://127.0.0.1:2379"},
		{in: "https://127.0.0.1:2379", secure: true, network: "tcp", addr: "127.0.0.1:2379", target: "127.0.0.1:2379", text: "https://127.0.0.1:2379"},
		{in: "HTTPS://127.0.0.1:2379", secure: true, network: "tcp", addr: "127.0.0.1:2379", target: "127.0.0.1:2379", text: "https://127.0.0.1:2379"},
		{in: " HtTp://[::1]:2379 ", network: "tcp", addr: "[::1]:2379", target: "[::1]:2379", text: "http://[::1]:2379"},
		{in: "unix://axon.sock", network: "unix", addr: "axon.sock", target: "unix:axon.sock", text: "unix://axon.sock"},
		{in: "unixs:///run/axon.sock", secure: true, network: "unix", addr: "/run/axon.sock", target: "unix:/run/axon.sock", text: "unixs:///run/axon.sock"},
		{in: "127.0.0.1:2379", err: `parse "127.0.0.1:2379": first path segment in URL cannot contain colon`},
		{in: "tcp://127.0.0.1:2379", err: "URL scheme must be http, https, unix, or unixs: tcp://127.0.0.1:2379"},
		{in: "https://127.0.0.1", err: `URL address does not have the form "host:port": https://127.0.0.1`},
		{in: "http://127.0.0.1:2379/", err: "URL must not contain a path: http://127.0.0.1:2379/"},
	} {
		u, err := urls.Parse(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Parse(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if u.Secure() != tc.secure || u.Network() != tc.network || u.Addr() != tc.addr || u.Target() != tc.target || u.String() != tc.text {
			t.Errorf("Parse(%q) = secure %v, %s %s, target %s, %s; want %v, %s %s, %s, %s", tc.in,
				u.Secure(), u.Network(), u.Addr(), u.Target(), u, tc.secure, tc.network, tc.addr, tc.target, tc.text)
		}
	}
}

func TestWithPort(t *testing.T) {
	u, err := urls.Parse("HTTPS://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() != "0" {
		t.Errorf("port %q", u.Port())
	}
	if got := u.WithPort("2379").String(); got != "https://127.0.0.1:2379" {
		t.Errorf("WithPort: %s", got)
	}
	s, _ := urls.Parse("unix://a.sock")
	if got := s.WithPort("2379").String(); got != "unix://a.sock" || s.Port() != "" {
		t.Errorf("a socket with a port: %s, port %q", got, s.Port())
	}
}

func TestParseFlagNamesTheFlag(t *testing.T) {
	_, err := urls.ParseFlag("listen-client-urls", []string{"http://127.0.0.1:1", "127.0.0.1:2379"})
	want := `invalid value "127.0.0.1:2379" for flag --listen-client-urls: parse "127.0.0.1:2379": first path segment in URL cannot contain colon`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
