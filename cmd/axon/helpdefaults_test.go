package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// serve's help states some defaults of core and server in words (what a
// 0 or a negative setting means): they must be the owners' values.
func TestServeHelpStatesTheOwnersDefaults(t *testing.T) {
	fl := serveCmd().Flags()
	tests := []struct{ flag, says string }{
		{"watch-cache-bytes", fmt.Sprintf("only the %d,%03d-event bound", core.DefaultRingSize/1000, core.DefaultRingSize%1000)},
		{"quota-backend-bytes", fmt.Sprintf("0: %d GiB", server.DefaultQuotaBytes>>30)},
	}
	for _, tt := range tests {
		f := fl.Lookup(tt.flag)
		if f == nil {
			t.Errorf("no --%s", tt.flag)
			continue
		}
		if !strings.Contains(f.Usage, tt.says) {
			t.Errorf("--%s's help %q does not say %q", tt.flag, f.Usage, tt.says)
		}
	}
}
