package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// Tokens are etcd's simple tokens in their use (opaque, from
// Authenticate, with a TTL), signed instead of kept in memory: any
// instance over the engine verifies one with the store's Secret. A token
// names its user, the CredRev of the user's password and the Epoch of
// auth it was issued in, so a changed password, a deleted user and a
// disabling void it, as they void etcd's. The expiry it carries is the
// TTL from issue; the driver may keep a token alive longer on its last
// use (etcd resets a simple token's TTL at each use) and hands a token so
// kept on to another instance renewed (RenewToken).

// tokenMAC is the length kept of a token's HMAC-SHA256.
const tokenMAC = 16

// simpleToken is a token's payload.
type simpleToken struct {
	user        string
	cred, epoch uint64
	expires     int64
	nonce       []byte
}

// IssueToken returns a token for user valid until expires (wall-clock
// Unix nanoseconds); nonce makes two tokens of one instant differ.
func (a *Store) IssueToken(user string, expires int64, nonce []byte) string {
	u := a.Users[user]
	if u == nil {
		return ""
	}
	return a.sealToken(simpleToken{user: user, cred: u.CredRev, epoch: a.Epoch, expires: expires, nonce: nonce})
}

func (a *Store) sealToken(t simpleToken) string {
	p := binary.AppendUvarint(nil, 1)
	p = appendBytes(p, []byte(t.user))
	p = binary.AppendUvarint(p, t.cred)
	p = binary.AppendUvarint(p, t.epoch)
	p = binary.AppendVarint(p, t.expires)
	p = appendBytes(p, t.nonce)
	return base64.RawURLEncoding.EncodeToString(p) + "." + base64.RawURLEncoding.EncodeToString(a.tokenMAC(p))
}

func (a *Store) tokenMAC(p []byte) []byte {
	m := hmac.New(sha256.New, a.Secret)
	m.Write([]byte("axon token\x00"))
	m.Write(p)
	return m.Sum(nil)[:tokenMAC]
}

// openToken decodes a token signed with the store's Secret; false for a
// malformed or forged one.
func (a *Store) openToken(token string) (simpleToken, bool) {
	payload, mac, ok := strings.Cut(token, ".")
	if !ok {
		return simpleToken{}, false
	}
	p, err1 := base64.RawURLEncoding.DecodeString(payload)
	m, err2 := base64.RawURLEncoding.DecodeString(mac)
	if err1 != nil || err2 != nil || len(a.Secret) == 0 || !hmac.Equal(m, a.tokenMAC(p)) {
		return simpleToken{}, false
	}
	d := authDecoder{b: p}
	ver := d.uvarint()
	t := simpleToken{user: string(d.bytes()), cred: d.uvarint(), epoch: d.uvarint()}
	exp, n := binary.Varint(d.b)
	if d.err != nil || ver != 1 || n <= 0 {
		return simpleToken{}, false
	}
	d.b = d.b[n:]
	t.expires, t.nonce = exp, d.bytes()
	if d.err != nil || len(d.b) != 0 {
		return simpleToken{}, false
	}
	return t, true
}

// ResolveToken is Resolve but for the time: the identity a token stands
// for at the store's current revision and the expiry it carries (Unix
// nanoseconds), or ErrAuthInvalidToken for a token that is malformed,
// forged or void.
func (a *Store) ResolveToken(token string) (id Identity, expires int64, err error) {
	t, ok := a.openToken(token)
	if !ok || t.epoch != a.Epoch {
		return Identity{}, 0, ErrAuthInvalidToken
	}
	u := a.Users[t.user]
	if u == nil || u.CredRev != t.cred {
		return Identity{}, 0, ErrAuthInvalidToken
	}
	return Identity{User: t.user, Revision: a.Revision}, t.expires, nil
}

// Resolve is etcd's lookup of a token: the identity it stands for at
// the store's current revision, or ErrAuthInvalidToken for a token that
// is malformed, forged, expired (now, Unix nanoseconds) or void.
func (a *Store) Resolve(token string, now int64) (Identity, error) {
	id, exp, err := a.ResolveToken(token)
	if err != nil || now >= exp {
		return Identity{}, ErrAuthInvalidToken
	}
	return id, nil
}

// RenewToken returns token with its expiry replaced, signed again; false
// for a token not signed with the store's Secret (a forged one gains
// nothing). It does not judge whether the token is void or expired.
func (a *Store) RenewToken(token string, expires int64) (string, bool) {
	t, ok := a.openToken(token)
	if !ok {
		return "", false
	}
	t.expires = expires
	return a.sealToken(t), true
}

// Login is the part of Authenticate after the password check: the user
// must exist and have a password. It returns the hash to compare with
// (bcrypt runs outside this package).
func (a *Store) Login(user string) (hash []byte, err error) {
	if !a.Enabled {
		return nil, ErrAuthNotEnabled
	}
	u := a.Users[user]
	switch {
	case u == nil:
		return nil, ErrAuthFailed
	case u.Options != nil && u.Options.NoPassword:
		return nil, ErrAuthNoPasswordUser
	}
	return u.Password, nil
}

// A PeerProof is what a call from one instance to another carries,
// sealed with the secret the instances share through the engine (and no
// client has): which instance sent it, until when it holds, and the user
// the sender took from its client's certificate under
// --client-cert-auth ("" for none), for the leader to run the call as.
// The user is sealed with the instance and the expiry, so a vouch cannot
// be moved to another call's proof, and a captured proof is good for
// its expiry only.
type PeerProof struct {
	Instance string
	User     string
	Expires  int64 // Unix nanoseconds
}

// SealPeerProof signs p with secret.
func SealPeerProof(secret []byte, p PeerProof) string {
	b := binary.AppendUvarint(nil, 1)
	b = appendBytes(b, []byte(p.Instance))
	b = appendBytes(b, []byte(p.User))
	b = binary.AppendVarint(b, p.Expires)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(peerProofMAC(secret, b))
}

func peerProofMAC(secret, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("axon peer proof\x00"))
	m.Write(b)
	return m.Sum(nil)[:tokenMAC]
}

// OpenPeerProof returns the proof s holds if secret sealed it, it has
// not expired at now and it expires within maxLife of now; false for a
// malformed, forged, expired or too long-lived one, and for any proof
// when there is no secret.
func OpenPeerProof(secret []byte, s string, now, maxLife int64) (PeerProof, bool) {
	payload, mac, ok := strings.Cut(s, ".")
	if !ok || len(secret) == 0 {
		return PeerProof{}, false
	}
	b, err1 := base64.RawURLEncoding.DecodeString(payload)
	got, err2 := base64.RawURLEncoding.DecodeString(mac)
	if err1 != nil || err2 != nil || !hmac.Equal(got, peerProofMAC(secret, b)) {
		return PeerProof{}, false
	}
	d := authDecoder{b: b}
	ver := d.uvarint()
	p := PeerProof{Instance: string(d.bytes()), User: string(d.bytes())}
	exp, n := binary.Varint(d.b)
	if d.err != nil || ver != 1 || n <= 0 || n != len(d.b) || now >= exp || exp-now > maxLife {
		return PeerProof{}, false
	}
	p.Expires = exp
	return p, true
}
