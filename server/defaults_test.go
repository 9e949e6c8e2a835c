package server

import "testing"

// AuthConfig fills in its token TTL in auth.go: it must be the constant
// embed's --auth-token-ttl default is.
func TestAuthTokenTTLDefault(t *testing.T) {
	if got := (AuthConfig{}).withDefaults().TokenTTL; got != DefaultAuthTokenTTL {
		t.Errorf("AuthConfig{} with defaults has TokenTTL %v, want DefaultAuthTokenTTL %v", got, DefaultAuthTokenTTL)
	}
}
