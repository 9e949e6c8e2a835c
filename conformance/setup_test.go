package conformance

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/grpclog"

	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// valuePrefix is what the test transformer puts in front of every stored
// value, so the suite can check values really pass through the transformer.
const valuePrefix = "axon-conformance!"

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	// The apiserver and the gRPC client are chatty on expected failures
	// (transformer errors, canceled watches); keep only real errors.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

func testCodec() runtime.Codec { return apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion) }

// swapTransformer is the transformer handed to the store. The suite swaps
// what it delegates to (UpdatePrefixTransformer / UpdateTransformer), which
// the etcd3 package's own tests do by writing the store's private fields.
type swapTransformer struct {
	mu  sync.RWMutex
	cur value.Transformer
}

func (s *swapTransformer) get() value.Transformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur
}

func (s *swapTransformer) set(t value.Transformer) {
	s.mu.Lock()
	s.cur = t
	s.mu.Unlock()
}

func (s *swapTransformer) TransformFromStorage(ctx context.Context, data []byte, dc value.Context) ([]byte, bool, error) {
	return s.get().TransformFromStorage(ctx, data, dc)
}

func (s *swapTransformer) TransformToStorage(ctx context.Context, data []byte, dc value.Context) ([]byte, error) {
	return s.get().TransformToStorage(ctx, data, dc)
}

// failingTransformer fails reads from storage while its flag is set.
type failingTransformer struct {
	value.Transformer
	fail atomic.Bool
}

func (f *failingTransformer) setFailing(b bool) { f.fail.Store(b) }

func (f *failingTransformer) TransformFromStorage(ctx context.Context, data []byte, dc value.Context) ([]byte, bool, error) {
	if f.fail.Load() {
		return nil, false, errors.New("conformance: injected transformer failure")
	}
	return f.Transformer.TransformFromStorage(ctx, data, dc)
}

// failingCodec fails decoding while its flag is set.
type failingCodec struct {
	runtime.Codec
	fail atomic.Bool
}

func (f *failingCodec) setFailing(b bool) { f.fail.Store(b) }

func (f *failingCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if f.fail.Load() {
		return nil, nil, errors.New("conformance: injected decode failure")
	}
	return f.Codec.Decode(data, defaults, into)
}

// env is one test's storage: an etcd3 store over a fresh backend.
type env struct {
	ctx    context.Context
	store  storage.Interface
	client *kubernetes.Client
	kv     *storagetesting.KVRecorder
	lists  *storagetesting.KubernetesRecorder
	codec  runtime.Codec
	prefix *storagetesting.PrefixTransformer // the base transformer
	xf     *swapTransformer
}

type setupConfig struct {
	backend     backendOptions
	codec       runtime.Codec
	transformer func(base value.Transformer) value.Transformer
	noNewFunc   bool
}

type setupOption func(*setupConfig)

func withCodec(c runtime.Codec) setupOption { return func(s *setupConfig) { s.codec = c } }

func withTransformer(f func(value.Transformer) value.Transformer) setupOption {
	return func(s *setupConfig) { s.transformer = f }
}

func withProgressNotify(d time.Duration) setupOption {
	return func(s *setupConfig) { s.backend.progressNotifyInterval = d }
}

// setup starts a fresh backend and builds an etcd3 store over it with the
// suite's defaults: the example Pod types under resource prefix /pods/, a
// value-prefixing transformer, a 1s lease reuse window and a compactor
// without a compaction loop.
func setup(t *testing.T, b backend, opts ...setupOption) *env {
	t.Helper()
	skipKnown(t, b)
	cfg := setupConfig{codec: testCodec()}
	for _, o := range opts {
		o(&cfg)
	}
	// Which server features the store may use (RequestWatchProgress,
	// RangeStream) is cached process-wide; each test talks to a new server,
	// possibly of the other backend, so start from a clean slate.
	orig := etcdfeature.DefaultFeatureSupportChecker
	etcdfeature.DefaultFeatureSupportChecker = etcdfeature.NewDefaultFeatureSupportChecker()
	t.Cleanup(func() { etcdfeature.DefaultFeatureSupportChecker = orig })

	client := b.start(t, cfg.backend)
	lists := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	kv := storagetesting.NewKVRecorder(client.KV, lists)
	client.KV = kv
	client.Kubernetes = lists

	prefix := storagetesting.NewPrefixTransformer([]byte(valuePrefix), false)
	var base value.Transformer = prefix
	if cfg.transformer != nil {
		base = cfg.transformer(prefix)
	}
	xf := &swapTransformer{cur: base}

	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)

	lease := etcd3.NewDefaultLeaseManagerConfig()
	lease.ReuseDurationSeconds = 1 // tests must not wait out the 60s default

	newFunc := func() runtime.Object { return &example.Pod{} }
	if cfg.noNewFunc {
		newFunc = nil
	}
	versioner := storage.APIObjectVersioner{}
	s, err := etcd3.New(client, compactor, cfg.codec,
		newFunc, func() runtime.Object { return &example.PodList{} },
		"", "/pods/", schema.GroupResource{Resource: "pods"},
		xf, lease, etcd3.NewDefaultDecoder(cfg.codec, versioner), versioner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &env{ctx: context.Background(), store: s, client: client, kv: kv, lists: lists, codec: cfg.codec, prefix: prefix, xf: xf}
}

// prefixStore adds UpdatePrefixTransformer (storagetesting.InterfaceWithPrefixTransformer).
type prefixStore struct {
	storage.Interface
	e *env
}

func (p prefixStore) UpdatePrefixTransformer(modify storagetesting.PrefixTransformerModifier) func() {
	before := p.e.xf.get()
	cp := *p.e.prefix
	p.e.xf.set(modify(&cp))
	return func() { p.e.xf.set(before) }
}

func (e *env) withPrefixTransformer() storagetesting.InterfaceWithPrefixTransformer {
	return prefixStore{Interface: e.store, e: e}
}

// overrideStore adds UpdateTransformer (storagetesting.InterfaceWithTransformerOverride).
type overrideStore struct {
	storage.Interface
	e *env
}

func (o overrideStore) UpdateTransformer(modify storagetesting.TransformerModifier) func() {
	before := o.e.xf.get()
	o.e.xf.set(modify(before))
	return func() { o.e.xf.set(before) }
}

func (e *env) withTransformerOverride(s storage.Interface) storagetesting.InterfaceWithTransformerOverride {
	return overrideStore{Interface: s, e: e}
}

// checkStored validates what Create/GuaranteedUpdate wrote, reading the raw
// key through the client: it carries the transformer prefix, decodes, and
// has neither resourceVersion nor selfLink persisted.
func (e *env) checkStored() storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		resp, err := e.client.KV.Get(ctx, key)
		if err != nil {
			t.Fatalf("raw get %q: %v", key, err)
		}
		if len(resp.Kvs) == 0 {
			t.Fatalf("raw get %q: no value", key)
		}
		raw := resp.Kvs[0].Value
		if len(raw) < len(valuePrefix) || string(raw[:len(valuePrefix)]) != valuePrefix {
			t.Fatalf("stored value of %q lacks the transformer prefix: %q", key, raw)
		}
		obj, err := runtime.Decode(e.codec, raw[len(valuePrefix):])
		if err != nil {
			t.Fatalf("decode stored %q: %v", key, err)
		}
		pod := obj.(*example.Pod)
		if pod.ResourceVersion != "" {
			t.Errorf("stored %q has resourceVersion %q, want none", key, pod.ResourceVersion)
		}
		//lint:ignore SA1019 the apiserver's own store tests check that selfLink is never stored
		if pod.SelfLink != "" {
			//lint:ignore SA1019 as above
			t.Errorf("stored %q has selfLink %q, want none", key, pod.SelfLink)
		}
	}
}

// increaseRV writes an unrelated key so the store revision moves on.
func (e *env) increaseRV() storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := e.client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}

// compaction compacts the backend at the given resource version through
// the apiserver's own compaction helper (which also bumps the shared
// compact_rev_key), then, when the store follows compactions
// (ListFromCacheSnapshot), waits until it has observed this one.
func (e *env) compaction() storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		// The first attempt learns the compact key's version if another
		// compaction got there first; the second uses it.
		version, _, _, err := etcd3.Compact(ctx, e.client.Client, 0, int64(rv))
		if err != nil {
			if _, _, _, err = etcd3.Compact(ctx, e.client.Client, version, int64(rv)); err != nil {
				t.Fatalf("compact at %d: %v", rv, err)
			}
		}
		if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for e.store.CompactRevision() != int64(rv) {
			if time.Now().After(deadline) {
				t.Fatalf("store did not observe compaction at %d (sees %d)", rv, e.store.CompactRevision())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// keys lists the stored keys of the resource, for size estimation.
func (e *env) keys(ctx context.Context) ([]string, error) {
	resp, err := e.client.KV.Get(ctx, "/pods/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out, nil
}

// corruptObjectError returns the error the etcd3 store classifies as a
// corrupt object (an untransformable value), built by the store's own
// exported error-classifying transformer wrapper.
func corruptObjectError() error {
	_, _, err := etcd3.WithCorruptObjErrorHandlingTransformer(brokenTransformer{}).TransformFromStorage(context.Background(), nil, value.DefaultContext{})
	return err
}

// brokenTransformer cannot read anything back.
type brokenTransformer struct{}

func (brokenTransformer) TransformFromStorage(context.Context, []byte, value.Context) ([]byte, bool, error) {
	return nil, false, errors.New("bits flipped")
}

func (brokenTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}
