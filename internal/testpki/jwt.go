package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"
)

// SigningKey is a key pair for JWTs, in PEM files as openssl writes them
// (PKCS #8 and PKIX), for --auth-token jwt on Axon and on etcd alike.
type SigningKey struct {
	Private           crypto.Signer
	PrivFile, PubFile string
}

// NewSigningKey makes a key for a JWT signing method's family ("RS",
// "PS", "ES256", "ES384", "ES512" or "EdDSA") and writes it to dir.
func NewSigningKey(t testing.TB, dir, alg string) *SigningKey {
	t.Helper()
	var k crypto.Signer
	var err error
	switch alg {
	case "RS", "PS":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ES512":
		k, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "EdDSA":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("no key for %q", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	WriteFiles(t, dir, map[string][]byte{
		alg + ".key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}),
		alg + ".pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	})
	return &SigningKey{Private: k, PrivFile: filepath.Join(dir, alg+".key"), PubFile: filepath.Join(dir, alg+".pub")}
}
