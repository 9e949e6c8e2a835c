package linearizability

import (
	"fmt"
	"strings"
	"testing"
)

func describeEvents(evs []Event) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		parts[i] = fmt.Sprintf("r%d %s %s", ev.Rev, ev.Type, ev.Kv.Key)
		if ev.PrevKv != nil {
			parts[i] += fmt.Sprintf(" (was %s)", ev.PrevKv.Value)
		}
	}
	return strings.Join(parts, "; ")
}

func TestReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Applied
		want string // events, or the error's start
	}{
		{"writes in revision order, whatever the input order", []Applied{
			{In: put("b", "1"), Out: putOK(3), Rev: 3, Wrote: true},
			{In: put("a", "1"), Out: putOK(2), Rev: 2, Wrote: true},
			{In: del("a"), Out: delOK(5, 1), Rev: 5, Wrote: true},
		}, "r2 PUT a; r3 PUT b; r5 DELETE a (was 1)"},
		{"a revoke deletes its lease's keys at its revision", []Applied{
			{In: grant(7), Out: granted(1, 7), Rev: 1},
			{In: putLease("a", "1", 7), Out: putOK(2), Rev: 2, Wrote: true},
			{In: putLease("b", "1", 7), Out: putOK(3), Rev: 3, Wrote: true},
			{In: revoke(7), Rev: 4, Wrote: true},
		}, "r2 PUT a; r3 PUT b; r4 DELETE a (was 1); r4 DELETE b (was 1)"},
		{"a lease nobody saw granted is skipped", []Applied{
			{In: revoke(9), Rev: 1},
			{In: put("a", "1"), Out: putOK(2), Rev: 2, Wrote: true},
		}, "r2 PUT a"},
		{"a write that changes nothing", []Applied{
			{In: del("a"), Out: delOK(2, 0), Rev: 2, Wrote: true},
		}, "r2 delete"},
		{"an answer the model would not give", []Applied{
			{In: put("a", "1"), Out: putOK(2), Rev: 2, Wrote: true},
			{In: del("a"), Out: delOK(3, 0), Rev: 3, Wrote: true},
		}, "r3 delete"},
		{"two writes at one revision", []Applied{
			{In: put("a", "1"), Out: putOK(2), Rev: 2, Wrote: true},
			{In: put("b", "1"), Out: putOK(2), Rev: 2, Wrote: true},
		}, "two writes at r2"},
		{"a revoke placed without a revision that deletes keys", []Applied{
			{In: grant(7), Out: granted(1, 7), Rev: 1},
			{In: putLease("a", "1", 7), Out: putOK(2), Rev: 2, Wrote: true},
			{In: revoke(7), Rev: 2},
		}, "revoke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := Replay(tc.ops)
			got := describeEvents(evs)
			if err != nil {
				got = err.Error()
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}
