package tikvserver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	"github.com/pingcap/kvproto/pkg/metapb"
	"github.com/tikv/client-go/v2/testutils"
	"github.com/tikv/client-go/v2/util/codec"
)

// RegionErrorKind is a region error the server injects. Each is one a
// real TiKV answers while a cluster changes, and client-go retries it
// without its caller seeing it.
type RegionErrorKind string

const (
	// NotLeader without a leader: the region is electing one. client-go
	// backs off briefly and retries.
	NotLeader RegionErrorKind = "NotLeader"
	// EpochNotMatch carrying the region as it is: client-go reloads its
	// cache entry and retries.
	EpochNotMatch RegionErrorKind = "EpochNotMatch"
	// ServerIsBusy: client-go backs off for a second or two and retries,
	// so even a small rate slows clients down a lot.
	ServerIsBusy RegionErrorKind = "ServerIsBusy"
)

// AllRegionErrors are the kinds the server can inject.
var AllRegionErrors = []RegionErrorKind{NotLeader, EpochNotMatch, ServerIsBusy}

// ParseRegionErrors parses a comma-separated list of kinds, in any case.
func ParseRegionErrors(s string) ([]RegionErrorKind, error) {
	var kinds []RegionErrorKind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, k := range AllRegionErrors {
			if strings.EqualFold(f, string(k)) {
				kinds, found = append(kinds, k), true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("region error %q: want one of %v", f, AllRegionErrors)
		}
	}
	return kinds, nil
}

// faults draws the TiKV requests that fail with a region error, from a
// seeded source.
type faults struct {
	rate  float64
	kinds []RegionErrorKind

	mu    sync.Mutex
	rng   *rand.Rand
	count map[RegionErrorKind]int64
}

func newFaults(rate float64, kinds []RegionErrorKind, seed uint64) *faults {
	return &faults{rate: rate, kinds: kinds, rng: rand.New(rand.NewPCG(seed, 0)), count: map[RegionErrorKind]int64{}}
}

// regionError returns the region error a request with ctx gets instead
// of running, or nil.
func (f *faults) regionError(ctx *kvrpcpb.Context, cluster *testutils.MockCluster) *errorpb.Error {
	if f.rate <= 0 {
		return nil
	}
	f.mu.Lock()
	hit := f.rng.Float64() < f.rate
	var kind RegionErrorKind
	if hit {
		kind = f.kinds[f.rng.IntN(len(f.kinds))]
		f.count[kind]++
	}
	f.mu.Unlock()
	if !hit {
		return nil
	}
	id := ctx.GetRegionId()
	switch kind {
	case NotLeader:
		return &errorpb.Error{Message: "not leader (injected)", NotLeader: &errorpb.NotLeader{RegionId: id}}
	case EpochNotMatch:
		var current []*metapb.Region
		if region, _ := cluster.GetRegion(id); region != nil {
			current = append(current, region)
		}
		return &errorpb.Error{Message: "epoch not match (injected)", EpochNotMatch: &errorpb.EpochNotMatch{CurrentRegions: current}}
	default:
		return &errorpb.Error{Message: "server is busy (injected)", ServerIsBusy: &errorpb.ServerIsBusy{Reason: "injected by tikv-server"}}
	}
}

func (f *faults) injected() map[RegionErrorKind]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[RegionErrorKind]int64, len(f.count))
	for k, v := range f.count {
		out[k] = v
	}
	return out
}

// maxSplitScan bounds the keys read to choose a split key.
const maxSplitScan = 4096

// splitLoop splits a region every interval until Close.
func (s *Server) splitLoop(every time.Duration, seed uint64) {
	defer s.splitsDone.Done()
	rng := rand.New(rand.NewPCG(seed, 1))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopSplits:
			return
		case <-t.C:
			s.splitOnce(rng)
		}
	}
}

// splitOnce splits a region chosen at random among those holding two
// keys or more at its middle key (of the first maxSplitScan), as PD does
// to a region grown too big. Requests in flight to it then get
// EpochNotMatch from the store.
func (s *Server) splitOnce(rng *rand.Rand) {
	regions := s.cluster.ScanRegions(nil, nil, 0)
	rng.Shuffle(len(regions), func(i, j int) { regions[i], regions[j] = regions[j], regions[i] })
	for _, r := range regions {
		start, end, err := rawRange(r.Meta)
		if err != nil {
			s.log.Error("tikv-server: split: region bounds", "region", r.Meta.GetId(), "err", err)
			return
		}
		pairs := s.mock.MvccStore.Scan(start, end, maxSplitScan, math.MaxUint64, kvrpcpb.IsolationLevel_RC, nil)
		if len(pairs) < 2 {
			continue
		}
		key := pairs[len(pairs)/2].Key
		ids := s.cluster.AllocIDs(2)
		s.cluster.Split(r.Meta.GetId(), ids[0], key, []uint64{ids[1]}, ids[1])
		s.log.Info("tikv-server: split region", "region", r.Meta.GetId(), "new-region", ids[0], "at", fmt.Sprintf("%q", key))
		return
	}
	s.log.Debug("tikv-server: no region to split")
}

// rawRange returns a region's bounds as the keys client-go sends; the
// cluster keeps them encoded, as PD does.
func rawRange(r *metapb.Region) (start, end []byte, err error) {
	decode := func(k []byte) ([]byte, error) {
		if len(k) == 0 {
			return nil, nil
		}
		_, raw, err := codec.DecodeBytes(k, nil)
		return raw, err
	}
	if start, err = decode(r.GetStartKey()); err != nil {
		return nil, nil, err
	}
	end, err = decode(r.GetEndKey())
	return start, end, err
}
