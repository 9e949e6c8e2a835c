package sim

import "testing"

func TestOneSeed(t *testing.T) {
	r := Run(Config{Seed: 1, Ops: 300, Trace: true})
	t.Log(r.Line())
	if r.Err != nil {
		for _, l := range r.Trace[max(0, len(r.Trace)-40):] {
			t.Log(l)
		}
		t.Fatal(r.Err)
	}
}
