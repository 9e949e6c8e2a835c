package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/storage/tikv"
)

func TestParseTiKVCounts(t *testing.T) {
	text := `# HELP axon_tikv_rpcs_total TiKV RPCs.
# TYPE axon_tikv_rpcs_total counter
axon_tikv_rpcs_total{type="Get"} 12
axon_tikv_rpcs_total{type="TSO"} 1.5e+06
axon_tikv_steps_total 7
axon_tikv_write_txns_total 4
axon_tikv_region_write_txns_total{region="3",space="L"} 2
axon_tikv_region_write_txns_total{region="9",space="S"} 4
`
	c := tikvCounts{rpcs: map[string]float64{}, regions: map[string]regionCount{}}
	if err := parseTiKVCounts(strings.NewReader(text), &c); err != nil {
		t.Fatal(err)
	}
	if c.rpcs["Get"] != 12 || c.rpcs["TSO"] != 1.5e6 || c.steps != 7 || c.txns != 4 ||
		c.regions["3"] != (regionCount{2, "L"}) || c.regions["9"] != (regionCount{4, "S"}) {
		t.Fatalf("parsed %+v", c)
	}
}

// TestTiKVQuick builds axon, runs the TiKV round-trip benchmark's quick
// form and checks its figures are sane.
func TestTiKVQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a server")
	}
	bin := filepath.Join(t.TempDir(), "axon")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/axon-kv/axon/cmd/axon").CombinedOutput(); err != nil {
		t.Fatalf("build axon: %v\n%s", err, out)
	}
	o := Quick()
	o.Binary = bin
	o.Clients = []int{1, 64}
	o.Ops = 200
	o.WorkDir = t.TempDir()
	const delay = 2 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunTiKV(ctx, o, TiKVOptions{RPCDelay: delay, Regions: 4})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	if len(rep.Rows) != len(TiKVWorkloads)*2 {
		t.Fatalf("%d rows; want %d", len(rep.Rows), len(TiKVWorkloads)*2)
	}
	for _, r := range rep.Rows {
		res := r.Result
		if res.Ops <= 0 || res.Errors != 0 {
			t.Errorf("%s: %d ops, %d errors (first: %s)", r.Name, res.Ops, res.Errors, res.FirstError)
		}
		// An update rewrites a key this leader wrote: its latest record
		// comes from the key cache, and it reads nothing from TiKV.
		reads := r.RPCsPerOp["Get"] + r.RPCsPerOp["BatchGet"] + r.RPCsPerOp["Scan"]
		switch update := strings.HasPrefix(r.Name, "update"); {
		case update && reads > 0.05:
			t.Errorf("%s: %.2f TiKV reads per op; the key cache should answer an update", r.Name, reads)
		case !update && reads <= 0:
			t.Errorf("%s: no TiKV read counted", r.Name)
		}
		if r.RPCsPerOp[tikv.TSO] < 0.5 {
			t.Errorf("%s: %.2f timestamps per op", r.Name, r.RPCsPerOp[tikv.TSO])
		}
		if r.Clients == 1 {
			// A leader's get reads without waiting for PD: one step,
			// or less where it overlaps background calls.
			if r.StepsPerOp < 0.5 || r.StepsPerOp > 10 {
				t.Errorf("%s: %.2f steps per op", r.Name, r.StepsPerOp)
			}
			// The delay holds up every step, timestamps included.
			if floor := r.StepsPerOp * float64(delay) / float64(time.Millisecond); res.P50Ms < 0.95*floor {
				t.Errorf("%s: p50 %.2fms below %.2f steps of %v", r.Name, res.P50Ms, r.StepsPerOp, delay)
			}
		} else if r.StepsPerOp != 0 {
			t.Errorf("%s: steps per op at %d clients", r.Name, r.Clients)
		}
		if r.Workload == Create || r.Workload == Update {
			// One write transaction per op (and a little background).
			if r.WriteTxnsPerOp < 1 || r.WriteTxnsPerOp > 1.2 {
				t.Errorf("%s: %.2f write txns per op", r.Name, r.WriteTxnsPerOp)
			}
			if r.BusiestShare <= 0 || r.BusiestShare > 1 {
				t.Errorf("%s: busiest region share %.2f", r.Name, r.BusiestShare)
			}
		}
	}
}
