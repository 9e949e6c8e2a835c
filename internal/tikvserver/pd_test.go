package tikvserver

import (
	"context"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/metapb"
	"github.com/pingcap/kvproto/pkg/pdpb"
	"github.com/tikv/client-go/v2/oracle"
	"github.com/tikv/client-go/v2/util/codec"
	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/pkg/caller"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// enc is a key as PD holds it: client-go's transactional keys in
// memcomparable form.
func enc(k string) []byte { return codec.EncodeBytes(nil, []byte(k)) }

func describeRegion(r *metapb.Region) string {
	if r == nil {
		return "none"
	}
	dec := func(k []byte) string {
		if len(k) == 0 {
			return "∞"
		}
		_, raw, err := codec.DecodeBytes(k, nil)
		if err != nil {
			return "!" + err.Error()
		}
		return string(raw)
	}
	return "[" + dec(r.GetStartKey()) + "," + dec(r.GetEndKey()) + ")"
}

// TestPDRegionsAndStores asks PD's unary calls what client-go's region
// cache and the PD client may ask, over regions [∞,b) [b,d) [d,∞).
func TestPDRegionsAndStores(t *testing.T) {
	s := start(t, Options{SplitKeys: [][]byte{[]byte("d"), []byte("b")}})
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := pdpb.NewPDClient(conn)

	members, err := c.GetMembers(ctx, &pdpb.GetMembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := members.GetLeader().GetClientUrls(); len(got) != 1 || got[0] != "http://"+s.Addr() {
		t.Errorf("leader's client URLs = %v; want [http://%s]", got, s.Addr())
	}
	h := &pdpb.RequestHeader{ClusterId: members.GetHeader().GetClusterId()}

	region := func(what string, resp *pdpb.GetRegionResponse, err error, want string) *metapb.Region {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := describeRegion(resp.GetRegion()); got != want {
			t.Errorf("%s = %s; want %s", what, got, want)
		}
		if resp.GetRegion() != nil && resp.GetLeader().GetStoreId() == 0 {
			t.Errorf("%s: no leader", what)
		}
		return resp.GetRegion()
	}
	resp, err := c.GetRegion(ctx, &pdpb.GetRegionRequest{Header: h, RegionKey: enc("c")})
	mid := region("GetRegion(c)", resp, err, "[b,d)")
	resp, err = c.GetPrevRegion(ctx, &pdpb.GetRegionRequest{Header: h, RegionKey: enc("c")})
	region("GetPrevRegion(c)", resp, err, "[∞,b)")
	resp, err = c.GetRegionByID(ctx, &pdpb.GetRegionByIDRequest{Header: h, RegionId: mid.GetId()})
	region("GetRegionByID", resp, err, "[b,d)")

	regions := func(what string, rs []*pdpb.Region, want ...string) {
		t.Helper()
		var got []string
		for _, r := range rs {
			got = append(got, describeRegion(r.GetRegion()))
		}
		if len(got) != len(want) {
			t.Errorf("%s = %v; want %v", what, got, want)
			return
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s = %v; want %v", what, got, want)
				return
			}
		}
	}
	//lint:ignore SA1019 older PD clients still call ScanRegions, so it is served.
	scan, err := c.ScanRegions(ctx, &pdpb.ScanRegionsRequest{Header: h, StartKey: enc("a"), Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	regions("ScanRegions(a, limit 2)", scan.GetRegions(), "[∞,b)", "[b,d)")
	batch, err := c.BatchScanRegions(ctx, &pdpb.BatchScanRegionsRequest{Header: h, Ranges: []*pdpb.KeyRange{
		{StartKey: enc("a"), EndKey: enc("a1")},
		{StartKey: enc("a2"), EndKey: enc("c")},
		{StartKey: enc("e")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	regions("BatchScanRegions", batch.GetRegions(), "[∞,b)", "[b,d)", "[d,∞)")

	stores, err := c.GetAllStores(ctx, &pdpb.GetAllStoresRequest{Header: h})
	if err != nil {
		t.Fatal(err)
	}
	if len(stores.GetStores()) != 1 || stores.GetStores()[0].GetAddress() != s.Addr() {
		t.Fatalf("stores = %v; want one at %s", stores.GetStores(), s.Addr())
	}
	store, err := c.GetStore(ctx, &pdpb.GetStoreRequest{Header: h, StoreId: stores.GetStores()[0].GetId()})
	if err != nil || store.GetStore().GetAddress() != s.Addr() {
		t.Errorf("GetStore = %v, %v; want the store at %s", store, err, s.Addr())
	}

	other := &pdpb.RequestHeader{ClusterId: h.ClusterId + 1}
	if _, err := c.GetRegion(ctx, &pdpb.GetRegionRequest{Header: other, RegionKey: enc("c")}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("GetRegion for another cluster: %v; want FailedPrecondition", err)
	}
}

// TestPDClient runs PD's own client on the server: timestamps only go up,
// across a restart too, and region lookups (its batched router stream)
// find the right regions.
func TestPDClient(t *testing.T) {
	s := start(t, Options{SplitKeys: [][]byte{[]byte("b")}})
	cli, err := pd.NewClient(caller.Component("tikvserver-test"), []string{s.Addr()}, pd.SecurityOption{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	next := func() {
		t.Helper()
		p, l, err := cli.GetTS(ctx)
		if err != nil {
			t.Fatalf("GetTS: %v", err)
		}
		ts := oracle.ComposeTS(p, l)
		if ts <= last {
			t.Fatalf("timestamp %d after %d", ts, last)
		}
		last = ts
	}
	for range 1000 {
		next()
	}
	if err := s.Restart(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		next()
	}
	for _, c := range []struct{ key, want string }{{"a", "[∞,b)"}, {"b", "[b,∞)"}, {"zzz", "[b,∞)"}} {
		// The router stream broke with the restart; the PD client
		// notices at its next lookup, fails it and reconnects, and its
		// callers (client-go's region cache) retry.
		r, err := cli.GetRegion(ctx, enc(c.key))
		for tries := 0; err != nil && tries < 20; tries++ {
			time.Sleep(50 * time.Millisecond)
			r, err = cli.GetRegion(ctx, enc(c.key))
		}
		if err != nil {
			t.Fatalf("GetRegion(%s): %v", c.key, err)
		}
		if got := describeRegion(r.Meta); got != c.want {
			t.Errorf("GetRegion(%s) = %s; want %s", c.key, got, c.want)
		}
	}
	r, err := cli.GetPrevRegion(ctx, enc("c"))
	if err != nil || describeRegion(r.Meta) != "[∞,b)" {
		t.Errorf("GetPrevRegion(c) = %v, %v; want [∞,b)", r, err)
	}
	if calls := s.Calls(); calls["/pdpb.PD/QueryRegion"] == 0 && calls["/pdpb.PD/GetRegion"] == 0 {
		t.Errorf("no region lookup reached the server: %v", calls)
	}
}

func TestTSOLogicalOverflow(t *testing.T) {
	var o tso
	p1, l1 := o.next(1)
	p2, l2 := o.next(1<<logicalBits - 2)
	if oracle.ComposeTS(p2, l2) <= oracle.ComposeTS(p1, l1) || l2 >= 1<<logicalBits {
		t.Fatalf("(%d,%d) after (%d,%d)", p2, l2, p1, l1)
	}
	// The next batch does not fit in this millisecond: it moves on.
	p3, l3 := o.next(10)
	if oracle.ComposeTS(p3, l3) <= oracle.ComposeTS(p2, l2) || l3 >= 1<<logicalBits {
		t.Fatalf("(%d,%d) after (%d,%d)", p3, l3, p2, l2)
	}
}
