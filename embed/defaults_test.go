package embed

import (
	"testing"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// The defaults of axon serve's flags are those of the settings' owners,
// core and server, so that a default changed there is changed here too:
// each is compared with the owner's constant and, where the owner fills
// it in itself, with what it fills in.
func TestFlagDefaultsAreTheOwners(t *testing.T) {
	cfg := NewConfig()
	member := core.NewMember(core.MemberConfig{}).Config()
	tests := []struct {
		flag      string
		got, want any
		applied   any // what the owner fills in for a zero setting; nil: not checked
	}{
		{"--name", cfg.Name, server.DefaultName, nil},
		{"--max-request-bytes", cfg.MaxRequestBytes, server.DefaultMaxRequestBytes, nil},
		{"--max-inflight-requests", cfg.MaxInflightRequests, server.DefaultMaxInflight, nil},
		{"--grpc-keepalive-*", cfg.KeepAlive, server.DefaultKeepAlive(), nil},
		{"--experimental-watch-progress-notify-interval", cfg.ProgressNotifyInterval, server.DefaultProgressNotifyInterval, nil},
		{"--auth-token-ttl", cfg.AuthTokenTTL, server.DefaultAuthTokenTTL, nil},
		{"--metrics", cfg.Metrics, server.MetricsBasic, nil},
		{"--max-txn-ops", cfg.MaxTxnOps, core.DefaultMaxTxnOps, member.Node.MaxTxnOps},
		{"--max-pending-writes", cfg.MaxPendingWrites, core.DefaultMaxPending, member.Node.MaxPending},
		{"--watch-cache-bytes", cfg.WatchCacheBytes, int64(core.DefaultRingBytes), member.Node.RingBytes},
		{"--leader-lease", cfg.LeaderLease, core.DefaultLease, member.Lease},
		{"--engine-deadline", cfg.EngineDeadline, core.DefaultEngineDeadline, member.EngineDeadline},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s defaults to %v, its owner's default is %v", tt.flag, tt.got, tt.want)
		}
		if tt.applied != nil && tt.applied != tt.want {
			t.Errorf("%s: the owner fills in %v, its constant says %v", tt.flag, tt.applied, tt.want)
		}
	}
}
