//go:build ignore

// gen writes a small Axon data directory with a past binary and records
// what that binary answers about it, for the data-directory format tests.
// See README.md in this directory for the command lines and
// the schema of answers.json.
//
//	go run ./server/testdata/formats/gen.go -bin /tmp/axon-f1-bin -format 1 -commit 33530b2 -out server/testdata/formats/v1
//	go run ./server/testdata/formats/gen.go -bin /tmp/axon-f1-bin -verify -out server/testdata/formats/v1
//
// Without -verify it removes OUT, starts BIN on OUT/data, runs the
// workload, records every revision's answers into OUT/answers.json, stops
// the server with SIGTERM, and then verifies (as -verify does). -verify
// starts BIN on a copy of OUT/data and checks that it answers
// OUT/answers.json exactly; the store itself is never written by it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Answers is the schema of answers.json (README.md documents it).
type Answers struct {
	Format          int      `json:"format"`           // data-directory format the binary wrote
	Commit          string   `json:"commit"`           // commit of the binary that wrote the store
	Revision        int64    `json:"revision"`         // current revision (header of every answer)
	CompactRevision int64    `json:"compact_revision"` // the compaction the workload asked for
	Ranges          []Range  `json:"ranges"`           // Range over all keys at revisions 1..revision, in order
	Leases          []Lease  `json:"leases"`           // LeaseLeases, by ID, with TimeToLive(keys)
	RevokedLeases   []Revoke `json:"revoked_leases"`   // leases revoked by the workload
}

// Range is the answer of Range{key "\x00", range_end "\x00", revision}.
type Range struct {
	Revision       int64 `json:"revision"`        // the revision asked for
	HeaderRevision int64 `json:"header_revision"` // header.revision of the answer (0 with an error)
	// Error is the gRPC status message when the call failed (the
	// compacted revisions), with its code's name; Kvs is then empty.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
	Count int64  `json:"count"`
	More  bool   `json:"more"`
	Kvs   []KV   `json:"kvs"`
}

// KV is mvccpb.KeyValue; key and value are base64 (Go's []byte).
type KV struct {
	Key            []byte `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
	Value          []byte `json:"value"`
	Lease          int64  `json:"lease"`
}

// Lease is one live lease: its ID, granted TTL and attached keys (sorted).
type Lease struct {
	ID         int64    `json:"id"`
	GrantedTTL int64    `json:"granted_ttl"`
	Keys       [][]byte `json:"keys"`
}

// Revoke is a revoked lease: LeaseTimeToLive answers TTL -1 for it.
type Revoke struct {
	ID  int64 `json:"id"`
	TTL int64 `json:"ttl"`
}

// The workload's leases (explicit IDs, so every run grants the same) and
// compaction.
const (
	leaseKeys    int64 = 0x1001             // long TTL, keys attached
	leaseRevoked int64 = 0x2002             // revoked with a key attached
	leaseEmpty   int64 = 0x123456789abcdef0 // long TTL, no keys; an ID past 2^53
	// longTTL keeps the lease alive whenever the test runs (31 years). Not
	// etcd's maximum 9e9: these binaries expire a lease at wall-clock
	// UnixNano + TTL·1s, which overflows past about 7.4e9 seconds (the
	// lease is gone at once).
	longTTL   int64 = 1_000_000_000
	compactAt int64 = 10     // the compaction's revision
	fromZero        = "\x00" // key and range_end of a Range over every key
)

var (
	bin     = flag.String("bin", "", "path of the axon binary that writes (or verifies) the store")
	out     = flag.String("out", "", "directory: OUT/data is the Badger store, OUT/answers.json the answers")
	format  = flag.Int("format", 0, "data-directory format the binary writes (recorded in answers.json)")
	commit  = flag.String("commit", "", "commit the binary was built from (recorded in answers.json)")
	verify  = flag.Bool("verify", false, "only verify: start BIN on a copy of OUT/data and compare with OUT/answers.json")
	logs    = flag.Bool("v", false, "pass the server's stderr through")
	timeout = 2 * time.Minute
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	if *bin == "" || *out == "" {
		log.Fatal("usage: go run gen.go -bin AXON -out DIR [-format N -commit C | -verify]")
	}
	if !*verify {
		if *format == 0 || *commit == "" {
			log.Fatal("-format and -commit are required to generate")
		}
		if err := generate(); err != nil {
			log.Fatal(err)
		}
	}
	if err := check(); err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %s answers as recorded", *out, *bin)
}

// server is one running axon serve.
type server struct {
	cmd *exec.Cmd
	cli *clientv3.Client
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs BIN serve on dir and waits until it answers.
func start(dir string) (*server, error) {
	addr := freeAddr()
	cmd := exec.Command(*bin, "serve", "--data-dir", dir,
		"--listen-client-urls", "http://"+addr, "--listen-metrics-urls", "http://"+freeAddr())
	cmd.Stdout = os.Stdout
	if *logs {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	s := &server{cmd: cmd, cli: cli}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "probe")
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("server did not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit (the engine closed).
func (s *server) stop() error {
	s.cli.Close()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("server exited: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		return errors.New("server did not stop within 30s of SIGTERM; killed")
	}
}

func generate() error {
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	dir := filepath.Join(*out, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s, err := start(dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := workload(ctx, s.cli); err != nil {
		_ = s.stop()
		return err
	}
	a, err := record(ctx, s.cli)
	if err != nil {
		_ = s.stop()
		return err
	}
	if err := s.stop(); err != nil {
		return err
	}
	a.Format, a.Commit = *format, *commit
	b, err := json.MarshalIndent(a, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "answers.json"), append(b, '\n'), 0o644)
}

// workload writes revisions 2..48 (a new store is at revision 1), each
// write checked to land at the revision the README lists.
func workload(ctx context.Context, cli *clientv3.Client) error {
	rev := int64(1)
	want := func(r *pb.ResponseHeader, what string) error {
		rev++
		if r.Revision != rev {
			return fmt.Errorf("%s: at revision %d, want %d", what, r.Revision, rev)
		}
		return nil
	}
	put := func(k, v string, opts ...clientv3.OpOption) error {
		r, err := cli.Put(ctx, k, v, opts...)
		if err != nil {
			return fmt.Errorf("put %q: %w", k, err)
		}
		return want(r.Header, fmt.Sprintf("put %q", k))
	}
	del := func(k string, n int64, opts ...clientv3.OpOption) error {
		r, err := cli.Delete(ctx, k, opts...)
		if err != nil {
			return fmt.Errorf("delete %q: %w", k, err)
		}
		if r.Deleted != n {
			return fmt.Errorf("delete %q deleted %d, want %d", k, r.Deleted, n)
		}
		return want(r.Header, fmt.Sprintf("delete %q", k))
	}
	lc := pb.NewLeaseClient(cli.ActiveConnection())
	grant := func(id, ttl int64) error {
		r, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: ttl})
		if err != nil {
			return fmt.Errorf("grant %#x: %w", id, err)
		}
		if r.ID != id || r.Header.Revision != rev { // a grant takes no revision
			return fmt.Errorf("grant %#x: got %#x at revision %d", id, r.ID, r.Header.Revision)
		}
		return nil
	}
	var big []byte // 1 KiB, every byte value four times
	for i := range 1024 {
		big = append(big, byte(i))
	}
	bin := "\x00\x01\x02\xfe\xff\x00"
	steps := []func() error{
		func() error { return put("a", "a1") },                     // 2
		func() error { return put("b", bin) },                      // 3: binary value
		func() error { return put("k\x00zero", "nul key") },        // 4: key with a 0x00 byte
		func() error { return put("empty", "") },                   // 5: empty value
		func() error { return put("a", "a2") },                     // 6: version 2
		func() error { return put("a", "a3") },                     // 7: version 3
		func() error { return put("dir/1", "d1") },                 // 8
		func() error { return put("dir/2", "d2") },                 // 9
		func() error { return put("dir/3", "d3") },                 // 10
		func() error { return del("b", 1) },                        // 11: delete
		func() error { return put("b", "b again") },                // 12: re-create (version 1)
		func() error { return put("bin\xff\x80key", string(big)) }, // 13: binary key, 1 KiB binary value
		func() error { // 14: one txn, two puts and a delete
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("a"), "=", 3)).
				Then(clientv3.OpPut("t1", "t1"), clientv3.OpPut("t2", "t2"), clientv3.OpDelete("a")).Commit()
			if err != nil {
				return fmt.Errorf("txn: %w", err)
			}
			if !r.Succeeded {
				return errors.New("txn did not succeed")
			}
			return want(r.Header, "txn")
		},
		func() error { return put("dir/2", "d2 v2") },                                                     // 15
		func() error { return del("dir/", 3, clientv3.WithPrefix()) },                                     // 16: DeleteRange over a prefix
		func() error { return grant(leaseKeys, longTTL) },                                                 // (no revision)
		func() error { return grant(leaseRevoked, 600) },                                                  // (no revision)
		func() error { return grant(leaseEmpty, longTTL) },                                                // (no revision)
		func() error { return put("lk1", "on lease", clientv3.WithLease(clientv3.LeaseID(leaseKeys))) },   // 17
		func() error { return put("lk2", "on lease", clientv3.WithLease(clientv3.LeaseID(leaseKeys))) },   // 18
		func() error { return put("lk3", "on lease", clientv3.WithLease(clientv3.LeaseID(leaseKeys))) },   // 19
		func() error { return put("lr1", "revoked", clientv3.WithLease(clientv3.LeaseID(leaseRevoked))) }, // 20
		func() error { return put("lk3", "off lease") },                                                   // 21: lk3 leaves the lease
		func() error { // 22: revoking deletes lr1
			r, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: leaseRevoked})
			if err != nil {
				return fmt.Errorf("revoke: %w", err)
			}
			return want(r.Header, "revoke")
		},
		func() error { return put("k\x00zero", "nul key 2") }, // 23
		func() error { return put("a", "a reborn") },          // 24: re-created after the txn deleted it
		func() error { return del("t1", 1) },                  // 25
		func() error { // compaction at 10 (no revision)
			r, err := cli.Compact(ctx, compactAt, clientv3.WithCompactPhysical())
			if err != nil {
				return fmt.Errorf("compact: %w", err)
			}
			if r.Header.Revision != rev {
				return fmt.Errorf("compact at revision %d, want %d", r.Header.Revision, rev)
			}
			return nil
		},
	}
	// 26..48: a counter key, versions 1..20, and three touches between.
	for i := 1; i <= 20; i++ {
		steps = append(steps, func() error { return put("counter", fmt.Sprintf("%d", i)) })
		switch i {
		case 5:
			steps = append(steps, func() error { return put("empty", "not empty") }) // over the compaction
		case 10:
			steps = append(steps, func() error { return del("lk2", 1) }) // a lease key deleted
		case 15:
			steps = append(steps, func() error { return put("b", "") }) // back to an empty value
		}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// record asks the server every question answers.json holds, and checks
// that other ways of asking agree with the Range over all keys.
func record(ctx context.Context, cli *clientv3.Client) (*Answers, error) {
	cur, err := cli.Get(ctx, fromZero, clientv3.WithFromKey())
	if err != nil {
		return nil, err
	}
	a := &Answers{Revision: cur.Header.Revision, CompactRevision: compactAt}
	keys := map[string]bool{} // every key ever seen, for the point reads
	for rev := int64(1); rev <= a.Revision; rev++ {
		r := Range{Revision: rev, Kvs: []KV{}}
		resp, err := cli.Get(ctx, fromZero, clientv3.WithFromKey(), clientv3.WithRev(rev))
		if err != nil {
			var ee rpctypes.EtcdError
			if !errors.As(err, &ee) {
				return nil, fmt.Errorf("range at %d: %w", rev, err)
			}
			r.Error, r.Code = ee.Error(), ee.Code().String()
			a.Ranges = append(a.Ranges, r)
			continue
		}
		r.HeaderRevision, r.Count, r.More = resp.Header.Revision, resp.Count, resp.More
		for _, kv := range resp.Kvs {
			r.Kvs = append(r.Kvs, kvOf(kv))
			keys[string(kv.Key)] = true
		}
		a.Ranges = append(a.Ranges, r)
	}
	for _, r := range a.Ranges {
		bad, err := agree(ctx, cli, r, keys)
		if err != nil {
			return nil, err
		}
		for _, b := range bad {
			log.Printf("warning: the binary disagrees with its own Range: %s", b)
		}
	}
	if a.Leases, err = leases(ctx, cli); err != nil {
		return nil, err
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(leaseRevoked))
	if err != nil {
		return nil, err
	}
	a.RevokedLeases = []Revoke{{ID: leaseRevoked, TTL: ttl.TTL}}
	return a, nil
}

func kvOf(kv *mvccpb.KeyValue) KV {
	return KV{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Value: nonNil(kv.Value), Lease: kv.Lease}
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// agree compares a point Get of every key, a keys-only Range and a
// count-only Range at r's revision with r, and returns where they
// disagree (answers.json records only r; a disagreement is the binary's,
// reported, not recorded). An error is a call that failed.
func agree(ctx context.Context, cli *clientv3.Client, r Range, keys map[string]bool) ([]string, error) {
	var bad []string
	if r.Error != "" {
		for k := range keys {
			if _, err := cli.Get(ctx, k, clientv3.WithRev(r.Revision)); err == nil || err.Error() != r.Error {
				bad = append(bad, fmt.Sprintf("get %q at compacted %d: %v, the range has %s", k, r.Revision, err, r.Error))
			}
		}
		return bad, nil
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		resp, err := cli.Get(ctx, k, clientv3.WithRev(r.Revision))
		if err != nil {
			return nil, fmt.Errorf("get %q at %d: %w", k, r.Revision, err)
		}
		var want []KV
		for _, kv := range r.Kvs {
			if string(kv.Key) == k {
				want = append(want, kv)
			}
		}
		var got []KV
		for _, kv := range resp.Kvs {
			got = append(got, kvOf(kv))
		}
		if !reflect.DeepEqual(got, want) {
			bad = append(bad, fmt.Sprintf("get %q at %d: %+v, the range has %+v", k, r.Revision, got, want))
		}
	}
	ko, err := cli.Get(ctx, fromZero, clientv3.WithFromKey(), clientv3.WithRev(r.Revision), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	if len(ko.Kvs) != len(r.Kvs) {
		bad = append(bad, fmt.Sprintf("keys-only at %d: %d keys, the range has %d", r.Revision, len(ko.Kvs), len(r.Kvs)))
	} else {
		for i, kv := range ko.Kvs {
			w := r.Kvs[i]
			w.Value, w.Lease = []byte{}, 0 // keys_only drops the lease too, as etcd
			if g := kvOf(kv); !reflect.DeepEqual(g, w) {
				bad = append(bad, fmt.Sprintf("keys-only at %d: %s, the range has %s", r.Revision, show(g), show(w)))
			}
		}
	}
	co, err := cli.Get(ctx, fromZero, clientv3.WithFromKey(), clientv3.WithRev(r.Revision), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	if co.Count != r.Count || len(co.Kvs) != 0 {
		bad = append(bad, fmt.Sprintf("count-only at %d: %d, the range has %d", r.Revision, co.Count, r.Count))
	}
	return bad, nil
}

func show(kv KV) string {
	return fmt.Sprintf("{key %q create %d mod %d version %d value %q lease %#x}", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Value, kv.Lease)
}

func leases(ctx context.Context, cli *clientv3.Client) ([]Lease, error) {
	ls, err := cli.Leases(ctx)
	if err != nil {
		return nil, err
	}
	out := []Lease{}
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			return nil, err
		}
		keys := [][]byte{}
		for _, k := range ttl.Keys {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, bytes.Compare)
		out = append(out, Lease{ID: int64(l.ID), GrantedTTL: ttl.GrantedTTL, Keys: keys})
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmpInt(a.ID, b.ID) })
	return out, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// check starts BIN on a copy of OUT/data and compares what it answers
// with OUT/answers.json.
func check() error {
	b, err := os.ReadFile(filepath.Join(*out, "answers.json"))
	if err != nil {
		return err
	}
	var want Answers
	if err := json.Unmarshal(b, &want); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "axon-format-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "data")
	if err := copyDir(filepath.Join(*out, "data"), dir); err != nil {
		return err
	}
	s, err := start(dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := record(ctx, s.cli)
	if serr := s.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	got.Format, got.Commit = want.Format, want.Commit
	// Compare through JSON, as a reader of answers.json sees them.
	gb, _ := json.MarshalIndent(got, "", "\t")
	wb, _ := json.MarshalIndent(&want, "", "\t")
	if !bytes.Equal(gb, wb) {
		return fmt.Errorf("%s answers differently from %s:\n%s", *bin, filepath.Join(*out, "answers.json"), firstDiff(string(wb), string(gb)))
	}
	return nil
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) && i < len(g); i++ {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d: recorded %s\n         now %s", i+1, w[i], g[i])
		}
	}
	return fmt.Sprintf("recorded %d lines, now %d", len(w), len(g))
}

func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, src); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}
