package embed

import (
	"net"
	"sync"
)

// connTracker is a listener that keeps the connections it accepted until
// they close, so that a stop can close those no server took over: the
// ones cmux is still sniffing when the servers stop.
type connTracker struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func trackConns(lis net.Listener) *connTracker {
	return &connTracker{Listener: lis, conns: map[*trackedConn]struct{}{}}
}

func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes the listener and every connection still open; later
// accepts fail.
func (t *connTracker) closeAll() {
	t.Listener.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Conn.Close()
	}
	clear(t.conns)
}

// trackedConn leaves its tracker when it closes.
type trackedConn struct {
	net.Conn
	t *connTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}
