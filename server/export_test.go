package server

import (
	"time"

	"google.golang.org/grpc"
)

// DropPeerConnections is a test hook: it closes this instance's pooled
// connections to other instances (calls in flight on them fail) and
// refuses new ones for d, as if the network between this instance and
// the leader were cut; d ≤ 0 heals at once.
func (s *Server) DropPeerConnections(d time.Duration) {
	p := s.peers
	p.mu.Lock()
	p.cutUntil = time.Now().Add(d)
	conns := p.conns
	p.conns = map[string]*grpc.ClientConn{}
	p.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
}

// RefuseFollow is a test hook: this instance, leading, answers the
// Follow peer stream Unimplemented, as a binary without it does.
func (s *Server) RefuseFollow() { s.peers.refuseFollow.Store(true) }

// PeerSecretKey and PeerProofKey name where the instances' secret lives
// in the engine and the metadata a proved call carries.
const (
	PeerSecretKey = peerSecretKey
	PeerProofKey  = peerProofKey
)
