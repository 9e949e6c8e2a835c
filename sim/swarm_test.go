package sim

import "testing"

func TestSwarmQuick(t *testing.T) {
	fails := 0
	for seed := uint64(1); seed <= 200; seed++ {
		r := Run(Config{Seed: seed, Ops: 1000})
		if r.Err != nil {
			fails++
			if fails <= 5 {
				t.Log(r.Line())
			}
		}
		if seed%50 == 0 {
			t.Log(r.Line())
		}
	}
	if fails > 0 {
		t.Fatalf("%d seeds failed", fails)
	}
}
