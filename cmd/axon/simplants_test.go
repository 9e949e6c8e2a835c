package main

import (
	"bytes"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestReplayCommandNamesEveryPlant: for each plant, on alone, the replay
// command a failing seed prints parses back into the same run.
func TestReplayCommandNamesEveryPlant(t *testing.T) {
	parse := func(line string) simFlags {
		t.Helper()
		args, ok := strings.CutPrefix(line, "axon sim ")
		if !ok {
			t.Fatalf("replay command %q is not an axon sim command", line)
		}
		var f simFlags
		fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatalf("replay command %q: %v", line, err)
		}
		return f
	}
	var base simFlags
	fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	base.register(fs)
	if err := fs.Parse([]string{"--ops", "300", "--exclusive"}); err != nil {
		t.Fatal(err)
	}
	if n, want := len(base.switches()), reflect.TypeOf(base.plants).NumField()-1+reflect.TypeOf(base.knobs).NumField()-1+reflect.TypeOf(base.knobs.Auth).NumField()+reflect.TypeOf(base.coreKnobs).NumField(); n != want {
		t.Fatalf("%d plant switches for the %d switches of sim.Plants, driver.TestingKnobs (auth.TestingKnobs within) and core.TestingKnobs", n, want)
	}
	for i, p := range base.switches() {
		f := base
		*f.switches()[i].on = true
		line := replayCommand(f, 7)
		if !strings.Contains(line, " --"+p.flag) {
			t.Errorf("--%s: replay command %q does not name it", p.flag, line)
		}
		if got, want := parse(line).config(7, false), f.config(7, false); !reflect.DeepEqual(got.Plants, want.Plants) || got.Knobs != want.Knobs || got.CoreKnobs != want.CoreKnobs || got.Ops != want.Ops || got.Exclusive != want.Exclusive || got.Seed != want.Seed {
			t.Errorf("--%s: replay command %q runs %+v, the failing run was %+v", p.flag, line, got, want)
		}
	}
}

// TestSimPlantFlagsReachTheSwarm: three plants the simulator's own tests
// use, given as flags, make a swarm fail, and the failing seed's replay
// command fails again with the flag and passes without it.
func TestSimPlantFlagsReachTheSwarm(t *testing.T) {
	run := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		cmd := simCmd()
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(append(args, "--out", t.TempDir()))
		err := cmd.Execute()
		return stdout.String(), err
	}
	replay := regexp.MustCompile(`replay: axon sim (.*)\n`)
	for _, tc := range []struct{ flag, ops, seeds string }{
		{"--skip-prev-reads", "500", "20"},
		{"--keep-keys-on-uncertain", "1000", "100"},
		{"--stale-snapshots", "1000", "3"},
	} {
		out, err := run("--seeds", tc.seeds, "--ops", tc.ops, tc.flag)
		if err == nil {
			t.Errorf("%s: %s seeds all passed:\n%s", tc.flag, tc.seeds, out)
			continue
		}
		m := replay.FindStringSubmatch(out)
		if m == nil || !strings.Contains(m[1], tc.flag) {
			t.Errorf("%s: no replay command naming the plant:\n%s", tc.flag, out)
			continue
		}
		args := strings.Fields(m[1])
		if out, err := run(args...); err == nil {
			t.Errorf("%s: the replay %q passed:\n%s", tc.flag, m[1], out)
		}
		clean := strings.Fields(strings.Replace(m[1], tc.flag, "", 1))
		if out, err := run(clean...); err != nil {
			t.Errorf("%s: the replay without the plant failed: %v\n%s", tc.flag, err, out)
		}
	}
}
