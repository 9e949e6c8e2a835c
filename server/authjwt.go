package server

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/axon-kv/axon/core/auth"
)

// etcd's errors for --auth-token, in its words.
var (
	ErrInvalidAuthOpts   = errors.New("auth: invalid auth options")
	ErrInvalidAuthMethod = errors.New("auth: invalid auth signature method")
	ErrMissingKey        = errors.New("auth: missing key data")
	ErrKeyMismatch       = errors.New("auth: public and private keys don't match")
	// ErrVerifyOnly answers Authenticate on an instance given a public
	// key only.
	ErrVerifyOnly = errors.New("auth: token signing attempted with verify-only key")
)

// AuthToken is a parsed --auth-token, in etcd's syntax: a kind, then
// comma-separated key=value options. "simple" is Axon's signed simple
// tokens; "jwt" JSON web tokens with the keys its options name, read once
// by ParseAuthToken; "" no tokens at all (etcd's nop provider: every
// Authenticate fails).
type AuthToken struct {
	kind string
	jwt  *jwtKeys
	// unknown are options etcd ignores with a warning.
	unknown []string
}

// JWT's options, as etcd names them.
const (
	optSignMethod = "sign-method"
	optPublicKey  = "pub-key"
	optPrivateKey = "priv-key"
	optTTL        = "ttl"
)

// defaultJWTTTL is etcd's: --auth-token-ttl is for simple tokens only.
const defaultJWTTTL = 5 * time.Minute

// ParseAuthToken parses --auth-token and, for JWT, reads and checks its
// keys: errors are etcd's (ErrInvalidAuthOpts and the others above),
// wrapped with the cause.
func ParseAuthToken(spec string) (*AuthToken, error) {
	kind, opts, err := splitTokenOptions(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "simple", "":
		return &AuthToken{kind: kind}, nil
	case "jwt":
	default:
		return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, kind)
	}
	t := &AuthToken{kind: kind}
	for k := range opts {
		switch k {
		case optSignMethod, optPublicKey, optPrivateKey, optTTL:
		default:
			t.unknown = append(t.unknown, k)
		}
	}
	if t.jwt, err = loadJWTKeys(opts); err != nil {
		return nil, err
	}
	return t, nil
}

// VerifyOnly reports whether the instance can check JWTs but not issue
// them (a public key alone).
func (t *AuthToken) VerifyOnly() bool { return t != nil && t.jwt != nil && t.jwt.sign == nil }

// splitTokenOptions is etcd's decomposeOpts: an option without exactly
// one '=' or given twice is refused.
func splitTokenOptions(spec string) (string, map[string]string, error) {
	parts := strings.Split(spec, ",")
	opts := map[string]string{}
	for _, o := range parts[1:] {
		kv := strings.Split(o, "=")
		if len(kv) != 2 {
			return "", nil, fmt.Errorf("%w: option %q is not key=value", ErrInvalidAuthOpts, o)
		}
		if _, dup := opts[kv[0]]; dup {
			return "", nil, fmt.Errorf("%w: option %q given twice", ErrInvalidAuthOpts, kv[0])
		}
		opts[kv[0]] = kv[1]
	}
	return parts[0], opts, nil
}

// jwtKeys signs and verifies etcd's JWTs: claims username, revision (the
// auth revision at Authenticate) and exp.
type jwtKeys struct {
	method jwt.SigningMethod
	sign   any // nil: verify only
	verify any
	ttl    time.Duration
}

// loadJWTKeys is etcd's jwtOptions.ParseWithDefaults and Key.
func loadJWTKeys(opts map[string]string) (*jwtKeys, error) {
	k := &jwtKeys{ttl: defaultJWTTTL}
	if s := opts[optTTL]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidAuthOpts, optTTL, err)
		}
		k.ttl = d
	}
	pems := map[string][]byte{}
	for _, o := range []string{optPublicKey, optPrivateKey} {
		if file := opts[o]; file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalidAuthOpts, o, err)
			}
			pems[o] = b
		}
	}
	alg := opts[optSignMethod]
	if k.method = jwt.GetSigningMethod(alg); k.method == nil {
		return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidAuthOpts, optSignMethod, alg, ErrInvalidAuthMethod)
	}
	if _, ok := k.method.(*jwt.SigningMethodHMAC); ok {
		// etcd signs with the private key file's bytes as they are.
		if len(pems[optPrivateKey]) == 0 {
			return nil, ErrMissingKey
		}
		k.sign, k.verify = pems[optPrivateKey], pems[optPrivateKey]
		return k, nil
	}
	parsePriv, parsePub := keyParsers(k.method)
	if parsePriv == nil {
		return nil, fmt.Errorf("%w: unsupported signing method: %T", ErrInvalidAuthOpts, k.method)
	}
	var priv crypto.Signer
	var pub interface{ Equal(crypto.PublicKey) bool }
	var err error
	if b := pems[optPrivateKey]; len(b) > 0 {
		if priv, err = parsePriv(b); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidAuthOpts, optPrivateKey, err)
		}
	}
	if b := pems[optPublicKey]; len(b) > 0 {
		if pub, err = parsePub(b); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidAuthOpts, optPublicKey, err)
		}
	}
	switch {
	case priv == nil && pub == nil:
		return nil, ErrMissingKey
	case priv == nil:
		k.verify = pub
	case pub != nil && !pub.Equal(priv.Public()):
		return nil, ErrKeyMismatch
	default:
		k.sign, k.verify = priv, priv.Public()
	}
	return k, nil
}

// keyParsers returns the PEM parsers of a signing method's keys (nil for
// a method without key pairs).
func keyParsers(m jwt.SigningMethod) (func([]byte) (crypto.Signer, error), func([]byte) (interface{ Equal(crypto.PublicKey) bool }, error)) {
	switch m.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		return asSigner(jwt.ParseRSAPrivateKeyFromPEM), asPublic(jwt.ParseRSAPublicKeyFromPEM)
	case *jwt.SigningMethodECDSA:
		return asSigner(jwt.ParseECPrivateKeyFromPEM), asPublic(jwt.ParseECPublicKeyFromPEM)
	case *jwt.SigningMethodEd25519:
		return asSigner(func(b []byte) (ed25519.PrivateKey, error) {
				k, err := jwt.ParseEdPrivateKeyFromPEM(b)
				if err != nil {
					return nil, err
				}
				return k.(ed25519.PrivateKey), nil // the parser returns no other type
			}), asPublic(func(b []byte) (ed25519.PublicKey, error) {
				k, err := jwt.ParseEdPublicKeyFromPEM(b)
				if err != nil {
					return nil, err
				}
				return k.(ed25519.PublicKey), nil
			})
	}
	return nil, nil
}

// asSigner and asPublic turn a typed parser into one of interfaces
// without wrapping a nil key in a non-nil interface.
func asSigner[K crypto.Signer](parse func([]byte) (K, error)) func([]byte) (crypto.Signer, error) {
	return func(b []byte) (crypto.Signer, error) {
		k, err := parse(b)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
}

func asPublic[K interface{ Equal(crypto.PublicKey) bool }](parse func([]byte) (K, error)) func([]byte) (interface{ Equal(crypto.PublicKey) bool }, error) {
	return func(b []byte) (interface{ Equal(crypto.PublicKey) bool }, error) {
		k, err := parse(b)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
}

// issue signs a token for user at the auth revision rev, as etcd's
// assign does.
func (k *jwtKeys) issue(user string, rev uint64, now time.Time) (string, error) {
	if k.sign == nil {
		return "", ErrVerifyOnly
	}
	return jwt.NewWithClaims(k.method, jwt.MapClaims{
		"username": user,
		"revision": rev,
		"exp":      now.Add(k.ttl).Unix(),
	}).SignedString(k.sign)
}

// resolve is etcd's tokenJWT.info: a token signed with the key by the
// configured method, unexpired at now, with a string username and a
// numeric revision, stands for that user at that revision (a change of
// the auth store since then makes etcd's permission checks answer
// "revision of auth store is old"); anything else is an invalid token.
func (k *jwtKeys) resolve(token string, now time.Time) (auth.Identity, error) {
	parsed, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return k.verify, nil },
		jwt.WithValidMethods([]string{k.method.Alg()}), jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil || !parsed.Valid {
		return auth.Identity{}, auth.ErrAuthInvalidToken
	}
	claims, _ := parsed.Claims.(jwt.MapClaims)
	user, ok1 := claims["username"].(string)
	rev, ok2 := claims["revision"].(float64)
	if !ok1 || !ok2 {
		return auth.Identity{}, auth.ErrAuthInvalidToken
	}
	return auth.Identity{User: user, Revision: uint64(rev)}, nil
}
