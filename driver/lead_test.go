package driver_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
)

// newFollower is newLeader's member after it handed the lead to b.1,
// which listens at "b".
func newFollower(t *testing.T) (*driver.Driver, *fakeClock) {
	t.Helper()
	d, clock, ex, m := newLeader(t)
	answered := false
	d.Transfer("b.1", "b", func(error) { answered = true })
	for i := 0; i < 10 && !answered; i++ {
		ex.drain(t, d, nil)
		clock.advance(20 * time.Millisecond)
	}
	if rec, ok := m.Leader(); !ok || rec.Addr != "b" || m.Role() != core.Follower {
		t.Fatalf("not following b: %s, leader %+v", core.DescribeMember(m), rec)
	}
	return d, clock
}

// TestAttemptSteps: what an Attempt asks its host to do, answer by
// answer. A wait is taken as the host does: AwaitLeader, woken by the
// retry timer.
func TestAttemptSteps(t *testing.T) {
	notLeader := driver.Answer{Err: core.ErrNotLeader}
	timedOut := errors.New("etcdserver: request timed out")
	finished := func(err error) string { return fmt.Sprintf("finished: %v", err) }
	for _, tc := range []struct {
		name      string
		follower  bool // the member follows b.1 at "b"
		forwarded bool
		answers   []driver.Answer // the host's answers to local and send steps, in turn
		late      bool            // the failover wait is over before the last answer
		gone      bool            // the caller stops waiting before the last answer
		want      []string
	}{{
		name:    "a leader runs the call locally",
		answers: []driver.Answer{{Rev: 3}},
		want:    []string{"local", finished(nil)},
	}, {
		name:     "a follower sends the call to the leader",
		follower: true,
		answers:  []driver.Answer{notLeader, {Rev: 5}},
		want:     []string{"local", "send b", finished(nil)},
	}, {
		name:     "a call the leader refused waits for a leader and runs again",
		follower: true,
		answers:  []driver.Answer{notLeader, notLeader, notLeader, {Rev: 7}},
		want:     []string{"local", "send b", "wait", "local", "send b", finished(nil)},
	}, {
		name:      "a forwarded call is not sent on",
		follower:  true,
		forwarded: true,
		answers:   []driver.Answer{notLeader},
		want:      []string{"local", finished(core.ErrNotLeader)},
	}, {
		name:     "past the failover wait a refused call ends without a leader",
		follower: true,
		answers:  []driver.Answer{notLeader, notLeader},
		late:     true,
		want:     []string{"local", "send b", finished(core.ErrNoLeader)},
	}, {
		name:     "a caller that stopped waiting gets the refusal, not another try",
		follower: true,
		answers:  []driver.Answer{notLeader, notLeader},
		gone:     true,
		want:     []string{"local", "send b", finished(core.ErrNotLeader)},
	}, {
		name:     "an answer that may hide an applied call is passed on",
		follower: true,
		answers:  []driver.Answer{notLeader, {Err: timedOut}},
		want:     []string{"local", "send b", finished(timedOut)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var d *driver.Driver
			var clock *fakeClock
			if tc.follower {
				d, clock = newFollower(t)
			} else {
				d, clock, _, _ = newLeader(t)
			}
			a := d.Begin(tc.forwarded)
			var got []string
			var prev *driver.Answer
			alive := true
			for ended := false; !ended; {
				if len(got) > 10 {
					t.Fatalf("no end: %q", got)
				}
				var s driver.Move
				if prev == nil {
					s = a.Start()
				} else {
					s = a.Next(*prev, alive)
				}
				prev = nil
				switch s.Action {
				case driver.RunLocal, driver.SendToLeader:
					step := "local"
					if s.Action == driver.SendToLeader {
						step = "send " + s.Addr
					}
					got = append(got, step)
					if len(tc.answers) == 0 {
						t.Fatalf("asked for more than the answers given: %q", got)
					}
					if len(tc.answers) == 1 {
						alive = !tc.gone
						if tc.late {
							clock.now += d.FailoverWait()
						}
					}
					prev = &tc.answers[0]
					tc.answers = tc.answers[1:]
				case driver.WaitForLeader:
					got = append(got, "wait")
					woke := false
					d.AwaitLeader(func() { woke = true })
					clock.advance(20 * time.Millisecond)
					if !woke {
						t.Fatal("AwaitLeader did not wake after RetryEvery")
					}
				case driver.Finished:
					got = append(got, finished(s.Err))
					ended = true
				default:
					t.Fatalf("step %+v", s)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("steps %q, want %q", got, tc.want)
			}
			if n := driver.Waiting(d); n != 0 {
				t.Fatalf("%d calls still wait for a leader change", n)
			}
		})
	}
}

// TestAttemptLearnsOnlySuccess: the commit point of a successful answer
// is learned, not that of a refusal.
func TestAttemptLearnsOnlySuccess(t *testing.T) {
	d, _ := newFollower(t)
	a := d.Begin(false)
	a.Start()
	if s := a.Next(driver.Answer{Rev: 4, Err: core.ErrNotLeader}, true); s.Action != driver.SendToLeader {
		t.Fatalf("step %+v, want SendToLeader", s)
	}
	if d.Known() != 0 {
		t.Fatalf("learned r%d from a refusal", d.Known())
	}
	if s := a.Next(driver.Answer{Rev: 11}, true); s.Action != driver.Finished || s.Err != nil {
		t.Fatalf("step %+v, want Finished", s)
	}
	if d.Known() != 11 {
		t.Fatalf("known r%d, want r11", d.Known())
	}
}
