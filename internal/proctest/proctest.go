// Package proctest serves the tests that run Axon's binaries as
// processes: free loopback addresses, binaries built from this module,
// and a process's output read while it writes.
package proctest

import (
	"bytes"
	"net"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// FreeAddr returns a loopback host:port no listener holds. Between this
// return and a server's bind another process's bind to port 0 could take
// the port (seen under make test's parallel packages); a connection closed
// by its accepting side leaves the port in TIME_WAIT, which the kernel
// does not hand out for port 0 for a minute, while a listener (Go sets
// SO_REUSEADDR) may bind it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	c.Close()
	return l.Addr().String()
}

// Build builds the package pkg of this module (an import path) into a
// temporary directory and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Output is what a process writes to its stdout and stderr, read while it
// runs.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
