package main

import "testing"

func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		name                string
		env                 string
		current, cpus, want int
	}{
		{"small machine", "", 2, 2, minProcs},
		{"large machine", "", 32, 32, 32},
		{"exactly minProcs", "", minProcs, minProcs, minProcs},
		{"operator's GOMAXPROCS", "2", 2, 2, 2},
		{"a CPU quota", "", 2, 16, 2},
	} {
		if got := procs(tc.env, tc.current, tc.cpus); got != tc.want {
			t.Errorf("%s: procs(%q, %d, %d) = %d, want %d", tc.name, tc.env, tc.current, tc.cpus, got, tc.want)
		}
	}
}
