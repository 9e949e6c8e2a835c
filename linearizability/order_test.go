package linearizability

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestKeylessRevokeAgainstPorcupine builds small histories around a
// revoke of a lease with no keys (it writes nothing, so it may take
// effect anywhere in its window) with reads at its revision and failed
// puts and revokes on its lease, some answered right and some wrong, and
// expects the revision-order witness to agree with porcupine's search.
func TestKeylessRevokeAgainstPorcupine(t *testing.T) {
	window := func(rng *rand.Rand, from, span int64) (int64, int64) {
		call := from + rng.Int64N(span)
		return call, call + 1 + rng.Int64N(span/2)
	}
	var ok, illegal int
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 0))
		ops := []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
		}
		rc, rr := window(rng, 5, 150)
		if rng.IntN(2) == 0 {
			// Like an expiry, which is called when its lease is granted.
			rc = 5 + rng.Int64N(30)
			rr = rc + 1 + rng.Int64N(200)
		}
		ops = append(ops, op{call: rc, ret: rr, in: revoke(7), out: revoked(2)})
		for range rng.IntN(3) {
			c, r := window(rng, 30, 150)
			ops = append(ops, op{call: c, ret: r, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))})
		}
		for range 1 + rng.IntN(3) {
			c, r := window(rng, 30, 200)
			in, out := touchLease("b", 7), errOut(ErrKeyNotFound)
			switch rng.IntN(4) {
			case 0:
				out = errOut(ErrLeaseNotFound)
			case 1:
				in, out = revoke(7), errOut(ErrLeaseNotFound)
			}
			ops = append(ops, op{call: c, ret: r, in: in, out: out})
		}
		if rng.IntN(2) == 0 {
			c, r := window(rng, 150, 150)
			ops = append(ops, op{call: c, ret: r, in: put("c", "1"), out: putOK(3)})
		}
		res, _ := Check(recordOps(ops).Operations(), time.Minute)
		err := CheckRevisionOrder(recordOps(ops).Operations())
		if (err == nil) != (res == porcupine.Ok) {
			var h []string
			for _, o := range ops {
				h = append(h, fmt.Sprintf("[%d,%d] %s", o.call, o.ret, describeOp(o.in, o.out)))
			}
			t.Fatalf("seed %d: CheckRevisionOrder = %v, porcupine says %s; history:\n%s", seed, err, res, strings.Join(h, "\n"))
		}
		if res == porcupine.Ok {
			ok++
		} else {
			illegal++
		}
	}
	if ok < 100 || illegal < 100 {
		t.Fatalf("%d linearizable histories and %d not: too few of one kind to compare", ok, illegal)
	}
}

// TestRevokeMomentNamed checks what the witness says when failures on a
// lease need its revoke on both sides.
func TestRevokeMomentNamed(t *testing.T) {
	err := CheckRevisionOrder(recordOps([]op{
		{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
		{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
		{call: 5, ret: 200, in: revoke(7), out: revoked(2)},
		{call: 60, ret: 70, in: revoke(7), out: errOut(ErrLeaseNotFound)},
		{call: 80, ret: 90, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
	}).Operations())
	want := `put "b"="" lease=7 ignore_value -> err: etcdserver: key not found (called at 80, returned at 90) fits only before lease 7's revoke (called at 5, returned at 200) took effect, revoke lease=7 -> err: etcdserver: requested lease not found (called at 60, returned at 70) only after it`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
