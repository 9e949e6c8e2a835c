package embed

import (
	"testing"
	"time"

	"github.com/axon-kv/axon/server"
)

func TestAutoCompactionFlagsReadLikeEtcds(t *testing.T) {
	tests := []struct {
		mode, retention string
		want            server.AutoCompaction
		bad             bool
	}{
		{"periodic", "0", server.AutoCompaction{}, false},
		{"periodic", "1", server.AutoCompaction{Mode: "periodic", Retention: time.Hour}, false},
		{"periodic", "30m", server.AutoCompaction{Mode: "periodic", Retention: 30 * time.Minute}, false},
		{"revision", "1000", server.AutoCompaction{Mode: "revision", Revisions: 1000}, false},
		{"revision", "1h", server.AutoCompaction{}, true},
		{"hourly", "1", server.AutoCompaction{}, true},
		{"periodic", "-2", server.AutoCompaction{}, true},
	}
	for _, tt := range tests {
		got, err := autoCompaction(tt.mode, tt.retention)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("autoCompaction(%q, %q) = %+v, %v; want %+v, error %v", tt.mode, tt.retention, got, err, tt.want, tt.bad)
		}
	}
}
