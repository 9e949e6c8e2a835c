package driver_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// authEngine runs auth changes on a memkv engine at once; uncertain
// makes a commit that lands answer storage.ErrUncertain.
type authEngine struct {
	eng       *memkv.Engine
	uncertain bool
}

func (e authEngine) Update(fn func(core.Reader) ([]core.Write, error), done func(error)) {
	err := driver.Update(context.Background(), e.eng, fn)
	if err == nil && e.uncertain {
		err = storage.ErrUncertain
	}
	done(err)
}

// changeAuth adds role name through d and returns what ChangeAuth said.
func changeAuth(t *testing.T, d *driver.Driver, eng authEngine, name string) (*auth.Store, error) {
	t.Helper()
	var (
		next   *auth.Store
		err    error
		called bool
	)
	d.ChangeAuth(driver.AuthChange{Change: &pb.AuthRoleAddRequest{Name: name}, Engine: eng}, func(st *auth.Store, e error) {
		next, err, called = st, e, true
	})
	if !called {
		t.Fatal("ChangeAuth did not answer")
	}
	return next, err
}

func snapshot(t *testing.T, eng *memkv.Engine) core.Reader {
	t.Helper()
	txn, err := eng.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Rollback)
	return storage.NewReader(txn)
}

// TestLeaderTrustsItsOwnChanges: a change acknowledged on the leader
// is its copy, checked against without an engine read.
func TestLeaderTrustsItsOwnChanges(t *testing.T) {
	d, _, ex, _ := newLeader(t)
	next, err := changeAuth(t, d, authEngine{eng: ex.eng}, "r1")
	if err != nil || next == nil || next.Seq != 1 {
		t.Fatalf("change: %v, %+v", err, next)
	}
	if got := d.LookAuth(true).Trusted(); got != next {
		t.Fatalf("the leader trusts %+v, want its change's store", got)
	}
	if d.LookAuth(false).Trusted() != nil {
		t.Fatal("a check that does not lead trusts the copy")
	}
}

// TestFailedChangeVoidsLoadsUnderWay: a check on the leader looks, its
// snapshot begins, then a change's commit answers uncertain and lands;
// the check's load finishes after. Once the engine deadline has passed
// the leader must not trust what that load kept: it predates the change.
func TestFailedChangeVoidsLoadsUnderWay(t *testing.T) {
	d, clock, ex, m := newLeader(t)
	if _, err := changeAuth(t, d, authEngine{eng: ex.eng, uncertain: true}, "r0"); err == nil {
		t.Fatal("an uncertain change answered nil")
	}
	pass(t, d, clock, ex, m.Config().EngineDeadline+time.Millisecond)
	look := d.LookAuth(true)
	if look.Trusted() != nil {
		t.Fatal("the leader trusts its copy right after a failed change")
	}
	rd := snapshot(t, ex.eng)
	if _, err := changeAuth(t, d, authEngine{eng: ex.eng, uncertain: true}, "r1"); err == nil {
		t.Fatal("an uncertain change answered nil")
	}
	if _, err := d.LoadAuth(look, rd); err != nil {
		t.Fatal(err)
	}
	pass(t, d, clock, ex, m.Config().EngineDeadline+time.Millisecond)
	if !d.Step(nil, nil) {
		t.Fatalf("not leading: %s", core.DescribeMember(m))
	}
	if st := d.LookAuth(true).Trusted(); st != nil && st.Roles["r1"] == nil {
		t.Fatalf("the leader trusts a copy at seq %d without the change that landed", st.Seq)
	}
}

// pass lets d time go by, its lease renewed as it goes.
func pass(t *testing.T, d *driver.Driver, clock *fakeClock, ex *queueExec, by time.Duration) {
	t.Helper()
	for end := clock.now + by; clock.now < end; {
		clock.advance(min(10*time.Millisecond, end-clock.now))
		d.Step(nil, nil)
		ex.drain(t, d, nil)
	}
}
