package kube

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

var diskPods = flag.Int("apiserver-disk", 0, "run TestAPIServerDisk with this many Pods (each with its status updates, events, and a tenth as many ConfigMaps and Secrets)")

// TestAPIServerDisk measures the disk a store takes for what a
// kube-apiserver writes: Pods as controllers create them and kubelets
// update their status, their Events, ConfigMaps of configuration text and
// Secrets of key material, all through a real apiserver. Each store is
// then compacted to its head and defragmented, and its size (what the
// quota counts) is set beside the bytes of its keys and values. Axon runs
// with each table compression, etcd as the reference. It runs only with
// -apiserver-disk N.
func TestAPIServerDisk(t *testing.T) {
	if *diskPods <= 0 {
		t.Skip("a disk measurement: run with -apiserver-disk N")
	}
	bin, err := apiserverBinary()
	if err != nil {
		t.Fatal(err)
	}
	cred := newCredentials(t)
	axon := func(compression string) func(*testing.T) store {
		return func(t *testing.T) store { return startAxonBadgerWith(t, compression) }
	}
	systems := []setup{
		{"axon-none", "Axon over Badger, tables uncompressed", axon("none")},
		{"axon-snappy", "Axon over Badger, tables Snappy-compressed", axon("snappy")},
		{"axon-zstd", "Axon over Badger, tables zstd-compressed", axon("zstd")},
		{"etcd", "embedded etcd v3.7.3, three members", startEtcd},
	}
	sizes := map[string]diskSize{}
	for _, s := range systems {
		t.Run(s.name, func(t *testing.T) {
			st := s.start(t)
			log := newAPILog(t)
			api := newAPIServer(t, bin, cred, st.endpoints(), log)
			api.args = append(api.args, "--etcd-compaction-interval=0") // this test compacts
			t.Cleanup(api.stop)
			api.start(t)
			sys := &benchSystem{name: s.name, api: api, log: log}
			began := time.Now()
			writes := writeCluster(t, sys, *diskPods)
			t.Logf("%s: %d writes through the apiserver in %v", s.name, writes, time.Since(began).Round(100*time.Millisecond))
			sz, err := measureDisk(t.Context(), st.endpoints())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d keys, %d bytes of keys and values; store %d bytes with the history, %d bytes (%.2f× the data) compacted and defragmented", s.name, sz.keys, sz.data, sz.before, sz.db, float64(sz.db)/float64(sz.data))
			sizes[s.name] = sz
		})
	}
	none, snappy, zstd := sizes["axon-none"], sizes["axon-snappy"], sizes["axon-zstd"]
	if none.db == 0 || snappy.db == 0 || zstd.db == 0 {
		t.Fatal("a store was not measured")
	}
	for _, s := range systems {
		sz := sizes[s.name]
		t.Logf("%-12s keys %7d  data %6.1f MiB  with history %6.1f MiB  compacted %6.1f MiB  compacted/data %.2f  compacted/axon-none %.2f",
			s.name, sz.keys, mib(sz.data), mib(sz.before), mib(sz.db), float64(sz.db)/float64(sz.data), float64(sz.db)/float64(none.db))
	}
	// What the apiserver writes compresses: a compressed store must be the
	// smaller one, or the option did nothing.
	if snappy.db >= none.db || zstd.db >= none.db {
		t.Errorf("compressed stores are not smaller: none %d, snappy %d, zstd %d bytes", none.db, snappy.db, zstd.db)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// diskSize is a store's size beside what it holds at its head.
type diskSize struct {
	keys int
	data int64 // bytes of keys and values
	// before is Status's DbSize once the writes are done, with their
	// history; db after compaction and defragmentation.
	before, db int64
}

// measureDisk compacts the store to its head, defragments every member and
// reads the size back; data is counted from a paginated read of every key.
func measureDisk(ctx context.Context, endpoints []string) (diskSize, error) {
	var out diskSize
	cli, err := storeClient(endpoints)
	if err != nil {
		return out, err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, endpoints[0])
	if err != nil {
		return out, err
	}
	out.before = st.DbSize
	rev := st.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return out, fmt.Errorf("compact at %d: %w", rev, err)
	}
	for key := "\x00"; ; {
		resp, err := cli.Get(ctx, key, clientv3.WithRange("\xff"), clientv3.WithLimit(1000), clientv3.WithRev(rev))
		if err != nil {
			return out, err
		}
		for _, kv := range resp.Kvs {
			out.keys++
			out.data += int64(len(kv.Key) + len(kv.Value))
		}
		if !resp.More {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for _, ep := range endpoints {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err := cli.Defragment(dctx, ep)
		cancel()
		if err != nil {
			return out, fmt.Errorf("defragment %s: %w", ep, err)
		}
	}
	if st, err = cli.Status(ctx, endpoints[0]); err != nil {
		return out, err
	}
	out.db = st.DbSize
	return out, nil
}

const diskNamespaces = 10

// writeCluster writes, through the apiserver, what a cluster of pods
// leaves in the store: for each of pods Pods a create (as a ReplicaSet
// controller makes it), two status updates (as a kubelet reports it
// scheduled, then running) and four Events; for every tenth, a ConfigMap
// of configuration text and a Secret of key material. It returns the
// writes made; any failure fails the test.
func writeCluster(t *testing.T, s *benchSystem, pods int) int {
	ctx := t.Context()
	cs := s.client(t, 0)
	for n := range diskNamespaces {
		ns := fmt.Sprintf("disk-%d", n)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		// The ServiceAccount admission plugin wants the default account,
		// and mounts its token into every Pod, as in a real cluster.
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": pemBlock(rand.New(rand.NewPCG(uint64(n), 1)), "CERTIFICATE", 1200)}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	const clients = 32
	var next, writes atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for w := range clients {
		cs := s.client(t, w)
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= pods {
					return
				}
				n, err := writePod(ctx, cs, i)
				writes.Add(int64(n))
				if err != nil {
					once.Do(func() { failed = fmt.Errorf("pod %d: %w", i, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatalf("%s: %v", s.name, failed)
	}
	return int(writes.Load())
}

// writePod makes pod i's objects; it returns how many writes it made.
func writePod(ctx context.Context, cs kubernetes.Interface, i int) (int, error) {
	rng := rand.New(rand.NewPCG(uint64(i), 2))
	ns := fmt.Sprintf("disk-%d", i%diskNamespaces)
	app := fmt.Sprintf("svc-%03d", i/20)
	hash := hex.EncodeToString(u64(rng))[:10]
	name := fmt.Sprintf("%s-%s-%s", app, hash, hex.EncodeToString(u64(rng))[:5])
	node := fmt.Sprintf("node-%03d", rng.IntN(200))
	writes := 0
	opts := metav1.CreateOptions{FieldManager: "kube-controller-manager"}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, podOf(rng, name, app, hash, node), opts)
	if err != nil {
		return writes, err
	}
	writes++
	now := metav1.NewTime(time.Unix(1_790_000_000+int64(i), 0).UTC())
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		HostIP:     fmt.Sprintf("10.20.%d.%d", rng.IntN(256), rng.IntN(256)), StartTime: &now,
	}
	kubelet := metav1.UpdateOptions{FieldManager: "kubelet"}
	if pod, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, kubelet); err != nil {
		return writes, err
	}
	writes++
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = fmt.Sprintf("10.244.%d.%d", rng.IntN(256), rng.IntN(256))
	pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	pod.Status.HostIPs = []corev1.HostIP{{IP: pod.Status.HostIP}}
	for _, c := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady} {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Ready: true, Image: c.Image, Started: ptr.To(true),
			ImageID:     c.Image[:strings.LastIndexByte(c.Image, ':')] + "@sha256:" + hex.EncodeToString(bytesOf(rng, 32)),
			ContainerID: "containerd://" + hex.EncodeToString(bytesOf(rng, 32)),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, kubelet); err != nil {
		return writes, err
	}
	writes++
	for _, ev := range []struct{ reason, from, message string }{
		{"Scheduled", "default-scheduler", fmt.Sprintf("Successfully assigned %s/%s to %s", ns, name, node)},
		{"Pulled", "kubelet", fmt.Sprintf("Container image %q already present on machine", pod.Spec.Containers[0].Image)},
		{"Created", "kubelet", "Created container: app"},
		{"Started", "kubelet", "Started container app"},
	} {
		_, err := cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", name, rng.Uint64())},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: pod.UID, APIVersion: "v1", ResourceVersion: pod.ResourceVersion},
			Reason:         ev.reason, Message: ev.message, Type: corev1.EventTypeNormal,
			Source:         corev1.EventSource{Component: ev.from, Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: ev.from, ReportingInstance: ev.from + "-" + node,
		}, metav1.CreateOptions{})
		if err != nil {
			return writes, err
		}
		writes++
	}
	if i%10 != 0 {
		return writes, nil
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-config", Labels: map[string]string{"app.kubernetes.io/name": app}},
		Data:       map[string]string{"application.yaml": configText(rng, app)},
	}, opts); err != nil && !apierrors.IsAlreadyExists(err) {
		return writes, err
	}
	writes++
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-tls", Labels: map[string]string{"app.kubernetes.io/name": app}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": []byte(pemBlock(rng, "CERTIFICATE", 1100)),
			"tls.key": []byte(pemBlock(rng, "PRIVATE KEY", 1200)),
		},
	}, opts); err != nil && !apierrors.IsAlreadyExists(err) {
		return writes, err
	}
	writes++
	return writes, nil
}

// podOf is a Pod as a ReplicaSet controller creates it from a typical
// Deployment's template: an application container and a proxy sidecar.
func podOf(rng *rand.Rand, name, app, hash, node string) *corev1.Pod {
	labels := map[string]string{
		"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.24.3",
		"pod-template-hash": hash, "team": fmt.Sprintf("team-%d", rng.IntN(12)),
	}
	env := []corev1.EnvVar{
		{Name: "LOG_LEVEL", Value: "info"}, {Name: "HTTP_PORT", Value: "8080"},
		{Name: "DATABASE_URL", Value: fmt.Sprintf("postgres://%s@db.shop.svc.cluster.local:5432/%s?sslmode=require", app, app)},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc:4317"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
	}
	probe := func(path string, delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: delay, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: labels,
			Annotations: map[string]string{
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
				"kubectl.kubernetes.io/restartedAt": "2026-11-02T09:14:07Z",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash,
				UID: types.UID(uuidOf(rng)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "app", Image: fmt.Sprintf("registry.example.com/shop/%s:1.24.3", app),
				Args:  []string{"--config=/etc/app/application.yaml", "--metrics-addr=:9090"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
				Env:   env,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true}},
				LivenessProbe:  probe("/healthz", 10),
				ReadinessProbe: probe("/readyz", 5),
			}, {
				Name: "proxy", Image: "docker.io/envoyproxy/envoy:v1.30.1",
				Args:      []string{"-c", "/etc/envoy/envoy.yaml", "--service-cluster", app},
				Ports:     []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}}},
		},
	}
}

// configText is an application's YAML configuration, of about 2 KiB.
func configText(rng *rand.Rand, app string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server:\n  name: %s\n  port: 8080\n  readTimeout: 30s\n  writeTimeout: 30s\n", app)
	b.WriteString("features:\n")
	for f := range 24 {
		fmt.Fprintf(&b, "  flag-%02d:\n    enabled: %t\n    rollout: %d\n", f, rng.IntN(2) == 0, rng.IntN(101))
	}
	b.WriteString("upstreams:\n")
	for u := range 12 {
		fmt.Fprintf(&b, "  - name: svc-%03d\n    url: http://svc-%03d.shop.svc.cluster.local:8080\n    timeout: %dms\n", u, rng.IntN(500), 100*(1+rng.IntN(20)))
	}
	return b.String()
}

// pemBlock is n characters of key material, PEM-encoded as a certificate
// or key is.
func pemBlock(rng *rand.Rand, kind string, n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	var b strings.Builder
	fmt.Fprintf(&b, "-----BEGIN %s-----\n", kind)
	for done := 0; done < n; done += 64 {
		for range min(64, n-done) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "-----END %s-----\n", kind)
	return b.String()
}

func bytesOf(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func u64(rng *rand.Rand) []byte { return bytesOf(rng, 8) }

func uuidOf(rng *rand.Rand) string {
	b := hex.EncodeToString(bytesOf(rng, 16))
	return b[:8] + "-" + b[8:12] + "-" + b[12:16] + "-" + b[16:20] + "-" + b[20:]
}
