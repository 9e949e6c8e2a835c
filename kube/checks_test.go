package kube

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// checks run in this order on every setup; each is a subtest.
var checks = []check{
	{name: "namespaces", run: checkNamespaces},
	{name: "configmaps", run: checkConfigMaps},
	{name: "secrets", run: checkSecrets},
	{name: "pods", run: checkPods},
	{name: "custom_resources", run: checkCustomResources},
	{name: "paginated_lists", run: checkLists},
	{name: "watch", run: checkWatch},
	{name: "contended_updates", run: checkContention},
	{name: "delete_collection", run: checkDeleteCollection},
	{name: "leases", run: checkLeases},
	{name: "apiserver_restart", run: checkRestart},
	{name: "leader_faults", run: checkLeaderFaults, faults: true},
	{name: "compaction", run: checkCompaction},
}

// timeout bounds a check's requests.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func rvOf(o metav1.Object) int64 {
	n, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return n
}

func mkNamespace(t *testing.T, ctx context.Context, e *env, name string) {
	t.Helper()
	_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

func checkNamespaces(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	ns := e.cs.CoreV1().Namespaces()
	for _, n := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if _, err := ns.Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Errorf("built-in namespace %s: %v", n, err)
		}
	}
	created, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-ns", Labels: map[string]string{"suite": "kube"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-ns"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("create again: want AlreadyExists, got %v", err)
	}
	list, err := ns.List(ctx, metav1.ListOptions{LabelSelector: "suite=kube"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "kube-ns" {
		t.Errorf("list by label: %v %v", names(list), err)
	}
	upd := created.DeepCopy()
	upd.Labels["stage"] = "updated"
	updated, err := ns.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if rvOf(updated) <= rvOf(created) {
		t.Errorf("update: resourceVersion %s after %s", updated.ResourceVersion, created.ResourceVersion)
	}
	stale := created.DeepCopy()
	stale.Labels["stage"] = "stale"
	if _, err := ns.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update from a stale resourceVersion: want Conflict, got %v", err)
	}
	if _, err := ns.Patch(ctx, "kube-ns", types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("merge patch: %v", err)
	}
	if err := ns.Delete(ctx, "kube-ns", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// No kube-controller-manager runs, so nothing empties the namespace:
	// it stays Terminating.
	got, err := ns.Get(ctx, "kube-ns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after delete: %v", err)
	}
	if got.DeletionTimestamp == nil || got.Status.Phase != corev1.NamespaceTerminating || got.Annotations["patched"] != "yes" || got.Labels["stage"] != "updated" {
		t.Errorf("after delete: phase %q, deletionTimestamp %v, labels %v, annotations %v", got.Status.Phase, got.DeletionTimestamp, got.Labels, got.Annotations)
	}
}

func names[L any](list *L) []string {
	if list == nil {
		return nil
	}
	var out []string
	switch l := any(list).(type) {
	case *corev1.NamespaceList:
		for _, i := range l.Items {
			out = append(out, i.Name)
		}
	case *corev1.ConfigMapList:
		for _, i := range l.Items {
			out = append(out, i.Name)
		}
	case *corev1.PodList:
		for _, i := range l.Items {
			out = append(out, i.Name)
		}
	case *unstructured.UnstructuredList:
		for _, i := range l.Items {
			out = append(out, i.GetName())
		}
	}
	return out
}

func checkConfigMaps(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	mkNamespace(t, ctx, e, "kube-cm")
	cms := e.cs.CoreV1().ConfigMaps("kube-cm")
	created, err := cms.Create(ctx, configMap("cm", map[string]string{"a": "1"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := cms.Create(ctx, configMap("cm", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("create again: want AlreadyExists, got %v", err)
	}
	got, err := cms.Get(ctx, "cm", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "1" || got.ResourceVersion != created.ResourceVersion || got.UID != created.UID {
		t.Errorf("get: %+v %v", got, err)
	}
	upd := got.DeepCopy()
	upd.Data["b"] = "2"
	updated, err := cms.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if rvOf(updated) <= rvOf(created) {
		t.Errorf("update: resourceVersion %s after %s", updated.ResourceVersion, created.ResourceVersion)
	}
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update from a stale resourceVersion: want Conflict, got %v", err)
	}
	if _, err := cms.Patch(ctx, "cm", types.StrategicMergePatchType, []byte(`{"data":{"c":"3"}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("strategic merge patch: %v", err)
	}
	if _, err := cms.Patch(ctx, "cm", types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/a","value":"one"}]`), metav1.PatchOptions{}); err != nil {
		t.Errorf("json patch: %v", err)
	}
	got, err = cms.Get(ctx, "cm", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "one" || got.Data["b"] != "2" || got.Data["c"] != "3" {
		t.Errorf("after patches: %v %v", got.Data, err)
	}
	gen, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(gen.Name, "gen-") {
		t.Errorf("generateName: %v %v", gen, err)
	}
	// Near the 1 MiB ConfigMap limit: the stored value is far above
	// gRPC's default message size and below etcd's request limit.
	big := strings.Repeat("0123456789abcdef", 60*1024) // 960 KiB
	if _, err := cms.Create(ctx, configMap("big", map[string]string{"big": big}), metav1.CreateOptions{}); err != nil {
		t.Errorf("create a 960 KiB ConfigMap: %v", err)
	} else if got, err := cms.Get(ctx, "big", metav1.GetOptions{}); err != nil || got.Data["big"] != big {
		t.Errorf("get the 960 KiB ConfigMap: %v", err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 3 { // cm, gen-…, big (no controller makes kube-root-ca.crt)
		t.Errorf("list: %v %v", names(list), err)
	}
	if err := cms.Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := cms.Get(ctx, "cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: want NotFound, got %v", err)
	}
	if err := cms.Delete(ctx, "cm", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete again: want NotFound, got %v", err)
	}
	// Delete with a precondition on a stale resourceVersion.
	big2, err := cms.Get(ctx, "big", metav1.GetOptions{})
	if err == nil {
		if _, err := cms.Patch(ctx, "big", types.MergePatchType, []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("patch big: %v", err)
		}
		err := cms.Delete(ctx, "big", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &big2.ResourceVersion}})
		if !apierrors.IsConflict(err) {
			t.Errorf("delete with a stale resourceVersion precondition: want Conflict, got %v", err)
		}
	}
}

func checkSecrets(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	mkNamespace(t, ctx, e, "kube-secret")
	secrets := e.cs.CoreV1().Secrets("kube-secret")
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	_, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Data:       map[string][]byte{"bytes": every},
		StringData: map[string]string{"text": "hello"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := secrets.Get(ctx, "s", metav1.GetOptions{})
	if err != nil || !bytes.Equal(got.Data["bytes"], every) || string(got.Data["text"]) != "hello" || got.Type != corev1.SecretTypeOpaque {
		t.Fatalf("get: %v %v", got, err)
	}
	got.Data["more"] = []byte{0, 0, 0}
	if _, err := secrets.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update: %v", err)
	}
	imm, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "immutable"}, Immutable: ptr.To(true), Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create immutable: %v", err)
	}
	imm.Data["k"] = []byte("changed")
	if _, err := secrets.Update(ctx, imm, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("update an immutable secret: want Invalid, got %v", err)
	}
	list, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Errorf("list: %d items, %v", len(list.Items), err)
	}
	for _, n := range []string{"s", "immutable"} {
		if err := secrets.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v", n, err)
		}
	}
	if _, err := secrets.Get(ctx, "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: want NotFound, got %v", err)
	}
}

func checkPods(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	mkNamespace(t, ctx, e, "kube-pod")
	// The ServiceAccount admission plugin wants the namespace's default
	// account, which kube-controller-manager would make.
	_, err := e.cs.CoreV1().ServiceAccounts("kube-pod").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account: %v", err)
	}
	pods := e.cs.CoreV1().Pods("kube-pod")
	for i := range 3 {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": "kube"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}}},
		}
		got, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("%s: phase %q, want Pending", p.Name, got.Status.Phase)
		}
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=kube"})
	if err != nil || len(list.Items) != 3 {
		t.Errorf("list by label: %v %v", names(list), err)
	}
	// What the scheduler and a kubelet would write.
	bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "pod-0"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
	if err := pods.Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	if err := pods.Bind(ctx, bind, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("bind again: want Conflict, got %v", err)
	}
	p0, err := pods.Get(ctx, "pod-0", metav1.GetOptions{})
	if err != nil || p0.Spec.NodeName != "node-a" {
		t.Fatalf("after bind: %v %v", p0, err)
	}
	p0.Status.Conditions = append(p0.Status.Conditions, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()})
	if _, err := pods.UpdateStatus(ctx, p0, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update status: %v", err)
	}
	onNode, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	if err != nil || len(onNode.Items) != 1 || onNode.Items[0].Name != "pod-0" {
		t.Errorf("list by spec.nodeName: %v %v", names(onNode), err)
	}
	// Not bound: deleted at once.
	if err := pods.Delete(ctx, "pod-1", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete pod-1: %v", err)
	}
	if _, err := pods.Get(ctx, "pod-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod-1 after delete: want NotFound, got %v", err)
	}
	// Bound: graceful, it waits for a kubelet that never comes...
	if err := pods.Delete(ctx, "pod-0", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete pod-0: %v", err)
	}
	if p, err := pods.Get(ctx, "pod-0", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Errorf("pod-0 after graceful delete: %v %v", p, err)
	}
	// ...until forced.
	if err := pods.Delete(ctx, "pod-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Errorf("force delete pod-0: %v", err)
	}
	if _, err := pods.Get(ctx, "pod-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod-0 after forced delete: want NotFound, got %v", err)
	}
	if p, err := pods.Get(ctx, "pod-2", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod-2: %v %v", p, err)
	}
}

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetGVR = schema.GroupVersionResource{Group: "kube.axon.test", Version: "v1", Resource: "widgets"}
)

const widgetCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.kube.axon.test"},
  "spec": {
    "group": "kube.axon.test",
    "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
      }}}
    }]
  }
}`

func checkCustomResources(t *testing.T, e *env) {
	ctx := timeout(t, 2*time.Minute)
	mkNamespace(t, ctx, e, "kube-crd")
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON([]byte(widgetCRD)); err != nil {
		t.Fatal(err)
	}
	crds := e.dyn.Resource(crdGVR)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, "widgets.kube.axon.test", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD not Established: %v", err)
	}
	widgets := e.dyn.Resource(widgetGVR).Namespace("kube-crd")
	widget := func(name string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kube.axon.test/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"size": size, "color": "blue"},
		}}
	}
	// An Established CRD is served, but the first request may still
	// race the handler's installation: retry NotFound for a moment.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := widgets.Create(ctx, widget("w-0", 0), metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create w-0: %v", err)
	}
	for i := 1; i < 5; i++ {
		if _, err := widgets.Create(ctx, widget(fmt.Sprintf("w-%d", i), int64(i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create w-%d: %v", i, err)
		}
	}
	var all []string
	opts := metav1.ListOptions{Limit: 2}
	for pages := 0; pages < 10; pages++ {
		list, err := widgets.List(ctx, opts)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		all = append(all, names(list)...)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if want := []string{"w-0", "w-1", "w-2", "w-3", "w-4"}; !slices.Equal(all, want) {
		t.Errorf("paged list: %v, want %v", all, want)
	}
	w1, err := widgets.Get(ctx, "w-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	_ = unstructured.SetNestedField(w1.Object, int64(10), "spec", "size")
	w1, err = widgets.Update(ctx, w1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	_ = unstructured.SetNestedField(w1.Object, true, "status", "ready")
	if _, err := widgets.UpdateStatus(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update status: %v", err)
	}
	got, err := widgets.Get(ctx, "w-1", metav1.GetOptions{})
	size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size")
	ready, _, _ := unstructured.NestedBool(got.Object, "status", "ready")
	if err != nil || size != 10 || !ready {
		t.Errorf("after updates: size %d ready %v, %v", size, ready, err)
	}
	if err := widgets.Delete(ctx, "w-0", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete w-0: %v", err)
	}
	if _, err := widgets.Get(ctx, "w-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("w-0 after delete: want NotFound, got %v", err)
	}
	// Deleting the CRD: its finalizer (run inside the apiserver) deletes
	// the widgets left, then the CRD goes.
	if err := crds.Delete(ctx, "widgets.kube.axon.test", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := crds.Get(ctx, "widgets.kube.axon.test", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Errorf("CRD still there after delete: %v", err)
	}
}

func checkLists(t *testing.T, e *env) {
	ctx := timeout(t, 2*time.Minute)
	mkNamespace(t, ctx, e, "kube-list")
	cms := e.cs.CoreV1().ConfigMaps("kube-list")
	const n = 50
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("cm-%03d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 5 {
		wg.Go(func() {
			for i := g; i < n; i += 5 {
				if _, err := cms.Create(ctx, configMap(want[i], map[string]string{"i": strconv.Itoa(i)}), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	head, err := cms.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	rv1 := head.ResourceVersion

	// paged walks the pages of a list; late creates an object after the
	// first page, which later pages must not show.
	paged := func(opts metav1.ListOptions, late string) ([]string, []string) {
		var got, rvs []string
		for pages := 0; pages < 2*n; pages++ {
			list, err := cms.List(ctx, opts)
			if err != nil {
				t.Fatalf("list %+v: %v", opts, err)
			}
			got = append(got, names(list)...)
			rvs = append(rvs, list.ResourceVersion)
			if pages == 0 && late != "" {
				if _, err := cms.Create(ctx, configMap(late, nil), metav1.CreateOptions{}); err != nil {
					t.Fatalf("create %s: %v", late, err)
				}
			}
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
			// A continue token carries its resourceVersion.
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		}
		return got, rvs
	}
	sameRV := func(what string, rvs []string, want string) {
		t.Helper()
		for _, rv := range rvs {
			if rv != rvs[0] || (want != "" && rv != want) {
				t.Errorf("%s: page resourceVersions %v, want all %s", what, rvs, cmp.Or(want, rvs[0]))
				return
			}
		}
	}

	got, rvs := paged(metav1.ListOptions{Limit: 7}, "zz-late-1")
	if !slices.Equal(got, want) {
		t.Errorf("rv=\"\" limit=7: %d items %v, want the %d made before the first page", len(got), got, n)
	}
	sameRV(`rv="" limit=7`, rvs, "")

	got, rvs = paged(metav1.ListOptions{Limit: 10, ResourceVersion: rv1, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, "")
	if !slices.Equal(got, want) {
		t.Errorf("rv=%s Exact limit=10: %d items %v, want the %d made before it", rv1, len(got), got, n)
	}
	sameRV("rv Exact", rvs, rv1)

	wantNow := append(slices.Clone(want), "zz-late-1")
	got, _ = paged(metav1.ListOptions{ResourceVersion: rv1, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, "")
	if !slices.Equal(got, wantNow) {
		t.Errorf("rv=%s NotOlderThan: %d items %v, want %d", rv1, len(got), got, len(wantNow))
	}

	// resourceVersion "0" is served from the watch cache, at any
	// version: it must show everything once the cache caught up.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, _ = paged(metav1.ListOptions{ResourceVersion: "0"}, "")
		return slices.Equal(got, wantNow), nil
	})
	if err != nil {
		t.Errorf("rv=0: %d items %v, want %d", len(got), got, len(wantNow))
	}
	got, _ = paged(metav1.ListOptions{ResourceVersion: "0", Limit: 7}, "")
	if !slices.Equal(got, wantNow) {
		t.Errorf("rv=0 limit=7: %d items %v, want %d", len(got), got, len(wantNow))
	}
	if cm, err := cms.Get(ctx, "cm-007", metav1.GetOptions{ResourceVersion: "0"}); err != nil || cm.Data["i"] != "7" {
		t.Errorf("get rv=0: %v %v", cm, err)
	}
	// Edge requests, whose answers are compared with etcd's.
	n1, _ := strconv.ParseInt(rv1, 10, 64)
	future := strconv.FormatInt(n1+1_000_000, 10)
	// No retries: the apiserver waits 3 s, then answers 504 with a
	// Retry-After that client-go would follow ten times.
	err = e.cs.CoreV1().RESTClient().Get().Namespace("kube-list").Resource("configmaps").
		VersionedParams(&metav1.ListOptions{ResourceVersion: future, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, scheme.ParameterCodec).
		MaxRetries(0).Do(ctx).Error()
	e.answer("list at a future exact resourceVersion", err)
	_, err = cms.List(ctx, metav1.ListOptions{Limit: 5, Continue: "not-a-token"})
	e.answer("list with a malformed continue token", err)
	_, err = cms.Get(ctx, "cm-007", metav1.GetOptions{ResourceVersion: rv1})
	e.answer("get at a past resourceVersion", err)
}

// expect is one write whose event a watch must deliver.
type expect struct {
	typ  watch.EventType
	name string
	rv   int64 // 0 when the client did not learn it (deletes)
}

func withoutBookmarks(events []event) []event {
	var out []event
	for _, e := range events {
		if e.typ != watch.Bookmark {
			out = append(out, e)
		}
	}
	return out
}

func (x expect) String() string { return fmt.Sprintf("%s %s@%d", x.typ, x.name, x.rv) }

// matchEvents compares a watch's events (bookmarks dropped) with the
// writes made, in order.
func matchEvents(events []event, want []expect) string {
	got := withoutBookmarks(events)
	for i, w := range want {
		if i >= len(got) {
			return fmt.Sprintf("missing from %v on (got %d of %d events)", w, len(got), len(want))
		}
		g := got[i]
		if g.typ != w.typ || g.name != w.name || (w.rv != 0 && g.rv != w.rv) {
			return fmt.Sprintf("event %d: got %v, want %v", i, g, w)
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("%d events more than written: %s", len(got)-len(want), describeEvents(got[len(want):]))
	}
	return ""
}

func checkWatch(t *testing.T, e *env) {
	ctx := timeout(t, 2*time.Minute)
	mkNamespace(t, ctx, e, "kube-watch")
	cms := e.cs.CoreV1().ConfigMaps("kube-watch")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	w := startWatch(ctx, cms.Watch, list.ResourceVersion, 5)

	var want []expect
	for i := range 10 {
		cm, err := cms.Create(ctx, configMap(fmt.Sprintf("c-%d", i), map[string]string{"v": "0"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		want = append(want, expect{watch.Added, cm.Name, rvOf(cm)})
	}
	for round := 1; round <= 2; round++ {
		for i := range 10 {
			patch := fmt.Sprintf(`{"data":{"v":"%d"}}`, round)
			cm, err := cms.Patch(ctx, fmt.Sprintf("c-%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("patch: %v", err)
			}
			want = append(want, expect{watch.Modified, cm.Name, rvOf(cm)})
		}
	}
	for i := range 5 {
		name := fmt.Sprintf("c-%d", i)
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		want = append(want, expect{watch.Deleted, name, 0})
	}
	s, _ := w.await(30*time.Second, func(s watchState) bool { return matchEvents(s.events, want) == "" })
	if msg := matchEvents(s.events, want); msg != "" {
		t.Errorf("watch from %s: %s\n\tevents: %s\n\terrors: %v %v", list.ResourceVersion, msg, describeEvents(s.events), s.gone, s.errs)
	}
	for _, p := range orderProblems(s.events) {
		t.Errorf("watch order: %s", p)
	}
	// A 5 s watch request gets a bookmark 2 s before it ends, with the
	// watch cache's resourceVersion: past ConfigMaps the watch does not
	// see, such as one in another namespace. The watcher then goes on
	// from the bookmark's resourceVersion.
	mkNamespace(t, ctx, e, "kube-watch-other")
	other, err := e.cs.CoreV1().ConfigMaps("kube-watch-other").Create(ctx, configMap("elsewhere", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create elsewhere: %v", err)
	}
	s, ok := w.await(20*time.Second, func(s watchState) bool {
		return slices.ContainsFunc(s.events, func(e event) bool { return e.typ == watch.Bookmark && e.rv >= rvOf(other) })
	})
	if !ok {
		t.Errorf("no bookmark at or after %s in 20 s (%d watch requests; errors %v %v)", other.ResourceVersion, s.requests, s.gone, s.errs)
	}
	for _, p := range orderProblems(s.events) {
		t.Errorf("watch order with bookmarks: %s", p)
	}
	if len(s.gone) > 0 || len(s.errs) > 0 {
		t.Errorf("watch errors: %v %v", s.gone, s.errs)
	}

	// From a resourceVersion in the middle: exactly the writes after it.
	mid := want[14]
	w2 := startWatch(ctx, cms.Watch, strconv.FormatInt(mid.rv, 10), 30)
	s2, _ := w2.await(30*time.Second, func(s watchState) bool { return matchEvents(s.events, want[15:]) == "" })
	if msg := matchEvents(s2.events, want[15:]); msg != "" {
		t.Errorf("watch from %d: %s\n\tevents: %s", mid.rv, msg, describeEvents(s2.events))
	}

	// From "0": the objects there are, as ADDED.
	w3 := startWatch(ctx, cms.Watch, "0", 30)
	left := []string{"c-5", "c-6", "c-7", "c-8", "c-9"}
	if s3, ok := w3.await(30*time.Second, seenAll(watch.Added, left)); !ok || len(withoutBookmarks(s3.events)) != len(left) {
		t.Errorf("watch from 0: %s, want ADDED %v", describeEvents(s3.events), left)
	}

	// A watch list (sendInitialEvents): the objects, then a bookmark
	// marking the end of the initial events.
	wl, err := cms.Watch(ctx, metav1.ListOptions{
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
		TimeoutSeconds: ptr.To[int64](30),
	})
	if err != nil {
		t.Fatalf("watch list: %v", err)
	}
	defer wl.Stop()
	var initial []string
	timer := time.After(30 * time.Second)
loop:
	for {
		select {
		case ev, ok := <-wl.ResultChan():
			if !ok {
				t.Errorf("watch list ended after %v without the initial-events-end bookmark", initial)
				break loop
			}
			switch ev.Type {
			case watch.Added:
				initial = append(initial, ev.Object.(*corev1.ConfigMap).Name)
			case watch.Bookmark:
				if ev.Object.(*corev1.ConfigMap).Annotations[metav1.InitialEventsAnnotationKey] == "true" {
					break loop
				}
			default:
				t.Errorf("watch list: unexpected %s event %v", ev.Type, ev.Object)
				break loop
			}
		case <-timer:
			t.Errorf("watch list: no initial-events-end bookmark in 30 s, got %v", initial)
			break loop
		}
	}
	slices.Sort(initial)
	if !slices.Equal(initial, left) {
		t.Errorf("watch list initial events: %v, want %v", initial, left)
	}
}

func checkContention(t *testing.T, e *env) {
	ctx := timeout(t, 2*time.Minute)
	mkNamespace(t, ctx, e, "kube-contend")
	cms := e.cs.CoreV1().ConfigMaps("kube-contend")
	if _, err := cms.Create(ctx, configMap("counter", map[string]string{"n": "0"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	const workers, each = 8, 25
	backoff := wait.Backoff{Steps: 1000, Duration: 5 * time.Millisecond, Factor: 1, Jitter: 2}
	var mu sync.Mutex
	conflicts := 0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	began := time.Now()
	for range workers {
		wg.Go(func() {
			for range each {
				err := retry.RetryOnConflict(backoff, func() error {
					cm, err := cms.Get(ctx, "counter", metav1.GetOptions{})
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(cm.Data["n"])
					cm.Data["n"] = strconv.Itoa(n + 1)
					_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) {
						mu.Lock()
						conflicts++
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("increment: %v", err)
	}
	cm, err := cms.Get(ctx, "counter", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if cm.Data["n"] != strconv.Itoa(workers*each) {
		t.Errorf("counter = %s, want %d", cm.Data["n"], workers*each)
	}
	t.Logf("%d increments from %d goroutines in %v, %d conflicts retried", workers*each, workers, time.Since(began).Round(time.Millisecond), conflicts)
}

func checkDeleteCollection(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	mkNamespace(t, ctx, e, "kube-dc")
	cms := e.cs.CoreV1().ConfigMaps("kube-dc")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	w := startWatch(ctx, cms.Watch, list.ResourceVersion, 30)
	var doomed []string
	for i := range 40 {
		group := "a"
		if i%4 == 3 {
			group = "b"
		}
		cm := configMap(fmt.Sprintf("dc-%02d", i), nil)
		cm.Labels = map[string]string{"group": group}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		if group == "a" {
			doomed = append(doomed, cm.Name)
		}
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "group=a"}); err != nil {
		t.Fatalf("delete collection: %v", err)
	}
	if a, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "group=a"}); err != nil || len(a.Items) != 0 {
		t.Errorf("group a after delete collection: %v %v", names(a), err)
	}
	if b, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "group=b"}); err != nil || len(b.Items) != 10 {
		t.Errorf("group b after delete collection: %v %v", names(b), err)
	}
	s, ok := w.await(30*time.Second, seenAll(watch.Deleted, doomed))
	if !ok {
		t.Errorf("watch: not every DELETED event of %v: %s (%v %v)", doomed, describeEvents(s.events), s.gone, s.errs)
	}
	for _, p := range orderProblems(s.events) {
		t.Errorf("watch order: %s", p)
	}
}

func checkLeases(t *testing.T, e *env) {
	ctx := timeout(t, time.Minute)
	l := startLeases(ctx, e, "kube-node-lease", 5, time.Second)
	// Kubelets renew every 10 s; these renew every 1-1.5 s, for 12 s.
	time.Sleep(12 * time.Second)
	st := l.stop()
	for _, err := range st.errs {
		t.Errorf("renew: %s", err)
	}
	for name, n := range st.renewals {
		if n < 6 {
			t.Errorf("%s: %d renewals in 12 s", name, n)
		}
		got, err := e.cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get %s: %v", name, err)
			continue
		}
		last := st.last[name]
		if got.ResourceVersion != last.ResourceVersion || !got.Spec.RenewTime.Equal(last.Spec.RenewTime) {
			t.Errorf("%s: stored rv %s renewTime %v, last renewal rv %s renewTime %v", name, got.ResourceVersion, got.Spec.RenewTime, last.ResourceVersion, last.Spec.RenewTime)
		}
	}
	t.Logf("renewals: %v", st.renewals)
}

// checkRestart restarts the apiserver under a client watch, twice, and
// creates ConfigMaps before and after each restart.
//
// First it kills the apiserver (SIGKILL): the watch must resume from its
// last resourceVersion — no 410, no relist, nothing missed or repeated.
//
// Then it stops it gracefully (SIGTERM). On its way out kube-apiserver
// deletes its identity and peer-server Leases in kube-system, so the new
// apiserver's watch cache starts after the watch's last resourceVersion
// and answers 410 Gone, with etcd as with any store: the watch relists,
// as a reflector would, and must then see every later ConfigMap.
//
// A 410 is explained from the store's own history (explainGone): only
// revisions that hold no write count against the store.
func checkRestart(t *testing.T, e *env) {
	ctx := timeout(t, 4*time.Minute)
	mkNamespace(t, ctx, e, "kube-restart")
	cms := e.cs.CoreV1().ConfigMaps("kube-restart")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	relist := func(ctx context.Context) (string, error) {
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}
	w := startRelistingWatch(ctx, cms.Watch, relist, list.ResourceVersion, 10)
	var want []expect
	create := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			cm, err := cms.Create(ctx, configMap(fmt.Sprintf("r-%02d", i), nil), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			want = append(want, expect{watch.Added, cm.Name, rvOf(cm)})
		}
	}
	restart := func(how string, stop func()) {
		t.Helper()
		before := w.lastRV()
		e.collectMetrics(t)
		e.phase("apiserver_restart: " + how)
		down := time.Now()
		stop()
		e.api.start(t)
		e.phase("apiserver_restart")
		t.Logf("%s: apiserver down and up again in %v; the watch was at %s", how, time.Since(down).Round(100*time.Millisecond), before)
	}
	first := w.lastRV()

	create(0, 10)
	if s, ok := w.await(30*time.Second, func(s watchState) bool { return matchEvents(s.events, want) == "" }); !ok {
		t.Fatalf("before the restarts: %s", matchEvents(s.events, want))
	}

	restart("kill", e.api.kill)
	create(10, 20)
	s, _ := w.await(60*time.Second, func(s watchState) bool { return matchEvents(s.events, want) == "" })
	for _, g := range s.gone {
		explainGone(t, ctx, e, g)
	}
	if len(s.gone) == 0 {
		if msg := matchEvents(s.events, want); msg != "" {
			t.Errorf("watch across the kill: %s\n\tevents: %s\n\terrors: %v", msg, describeEvents(s.events), s.errs)
		}
	}
	t.Logf("kill: %d watch requests, %d relists; %d failed while the apiserver was away", s.requests, s.relists, len(s.errs))

	gone := len(s.gone)
	restart("stop", e.api.stop)
	n := len(want)
	create(20, 30)
	var later []string
	for _, x := range want[n:] {
		later = append(later, x.name)
	}
	s, ok := w.await(60*time.Second, seenAll(watch.Added, later))
	if !ok {
		t.Errorf("watch across the graceful restart: not every ADDED of %v: %s (errors %v)", later, describeEvents(s.events), s.errs)
	}
	for _, g := range s.gone[gone:] {
		explainGone(t, ctx, e, g)
	}
	for _, p := range orderProblems(s.events) {
		t.Errorf("watch order: %s", p)
	}
	t.Logf("in all: %d watch requests, %d relists, %d failures", s.requests, s.relists, len(s.errs))
	noWriteRevisions(t, ctx, e, first)
}

// checkLeaderFaults moves leadership and kills the leading member while
// the apiserver serves readers, writers, lease renewals and a watch. No
// read may fail; a write may fail only in a way the client can retry;
// the watch goes on without a gap.
func checkLeaderFaults(t *testing.T, e *env) {
	c := e.store.(cluster)
	ctx := timeout(t, 4*time.Minute)
	mkNamespace(t, ctx, e, "kube-faults")
	cms := e.cs.CoreV1().ConfigMaps("kube-faults")
	if _, err := cms.Create(ctx, configMap("read-me", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	w := startWatch(ctx, cms.Watch, list.ResourceVersion, 10)
	ld := startLoad(ctx, e, "kube-faults")
	leases := startLeases(ctx, e, "kube-faults", 3, time.Second)

	step := func(name string, d time.Duration) {
		e.phase("leader_faults: " + name)
		time.Sleep(d)
	}
	step("steady", 3*time.Second)
	e.phase("leader_faults: move leader")
	from, to, took, err := moveLeader(ctx, c, e.store.endpoints())
	if err != nil {
		t.Errorf("move leader: %v", err)
	} else {
		t.Logf("leadership moved from member %d to %d in %v", from, to, took.Round(time.Millisecond))
	}
	step("after move", 4*time.Second)
	e.phase("leader_faults: kill leader")
	l, err := c.leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.kill(t, l)
	nl, err := c.leader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d killed; member %d leads after %v", l, nl, time.Since(killed).Round(time.Millisecond))
	step("after kill", 6*time.Second)
	e.phase("leader_faults: restart member")
	c.restart(t, l)
	step("after restart", 4*time.Second)
	e.phase("leader_faults: stop load")
	ops := ld.stop()
	lst := leases.stop()
	e.phase("leader_faults")

	// Reads: none may fail. Writes: only retryable failures.
	var reads, writes, retryable int
	for _, op := range ops {
		if op.read {
			reads++
		} else {
			writes++
		}
		if op.err == nil {
			continue
		}
		if op.read {
			e.report.add(observation{kind: kindFaultRead, key: errKey(op.what, op.err), phase: op.phase, detail: op.what + ": " + op.err.Error()})
		} else if isRetryable(op.err) {
			retryable++
			t.Logf("retryable write failure in %s: %s: %v", op.phase, op.what, op.err)
		} else {
			e.report.add(observation{kind: kindFaultWrite, key: errKey(op.what, op.err), phase: op.phase, detail: op.what + ": " + op.err.Error()})
		}
	}
	for _, le := range lst.errors {
		if isRetryable(le.err) {
			retryable++
			t.Logf("retryable lease renewal failure in %s: %v", le.phase, le.err)
		} else {
			e.report.add(observation{kind: kindFaultWrite, key: errKey("renew lease", le.err), phase: le.phase, detail: "renew lease: " + le.err.Error()})
		}
	}
	t.Logf("%d reads, %d writes, %d lease renewals; %d retryable write failures", reads, writes, sum(lst.renewals), retryable)

	// The watch: every acknowledged write's event, in order; events of
	// failed writes may or may not come (their outcome is unknown);
	// nothing else.
	ack := map[string]op{}
	unknown := map[string]bool{}
	for _, op := range ops {
		if op.read {
			continue
		}
		if op.err == nil {
			ack[op.name+"@"+strconv.FormatInt(op.rv, 10)] = op
		} else {
			unknown[op.name] = true
		}
	}
	s, _ := w.await(60*time.Second, func(s watchState) bool {
		seen := map[string]bool{}
		for _, ev := range s.events {
			seen[ev.name+"@"+strconv.FormatInt(ev.rv, 10)] = true
		}
		for k := range ack {
			if !seen[k] {
				return false
			}
		}
		return true
	})
	for _, g := range s.gone {
		e.report.add(observation{kind: kindWatchGone, key: normalize(g), detail: g})
	}
	for _, p := range orderProblems(s.events) {
		t.Errorf("watch order: %s", p)
	}
	seen := map[string]bool{}
	for _, ev := range s.events {
		if ev.typ == watch.Bookmark || ev.name == "read-me" {
			continue
		}
		k := ev.name + "@" + strconv.FormatInt(ev.rv, 10)
		seen[k] = true
		if _, ok := ack[k]; !ok && !unknown[ev.name] {
			t.Errorf("watch: event %v of no write", ev)
		}
	}
	missing := 0
	for k := range ack {
		if !seen[k] {
			missing++
			if missing <= 5 {
				t.Errorf("watch: no event for acknowledged write %s", k)
			}
		}
	}
	if len(s.gone) == 0 && missing > 0 {
		t.Errorf("watch: %d acknowledged writes without an event (%d events, %d watch requests, errors %v)", missing, len(s.events), s.requests, s.errs)
	}
	if len(s.errs) > 0 {
		t.Logf("watch request failures: %v", s.errs)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// isRetryable says whether a failed write tells the client to come back:
// 429, 503, 504, a server timeout, or a Retry-After.
func isRetryable(err error) bool {
	if _, ok := apierrors.SuggestsClientDelay(err); ok {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// errKey is how a failed request is compared between setups.
func errKey(what string, err error) string {
	verb, _, _ := strings.Cut(what, " ")
	if st, ok := err.(apierrors.APIStatus); ok {
		s := st.Status()
		return normalize(fmt.Sprintf("%s: %d %s: %s", verb, s.Code, s.Reason, s.Message))
	}
	return normalize(verb + ": " + err.Error())
}

// tooOld is the watch cache's answer to a watch from before its oldest
// event: "too old resource version: <asked> (<oldest-1>)".
var tooOld = regexp.MustCompile(`too old resource version: (\d+) \((\d+)\)`)

// explainGone looks in the store at the revisions between the one a
// resumed watch asked for and the one the new watch cache starts at.
// kube-apiserver's watch cache starts at the revision of its first
// LIST, so after a restart a watch from an older revision gets 410 when
// anything was written in between: that is kube-apiserver's behaviour,
// the same over etcd, and only logged. A 410 over revisions that hold no
// write at all is the store's doing (etcd deals a revision only to a
// write): that is kept as an observation. Revisions without a write
// next to real writes are noted, not failed: the 410 comes anyway.
func explainGone(t *testing.T, ctx context.Context, e *env, gone string) {
	t.Helper()
	m := tooOld.FindStringSubmatch(gone)
	if m == nil {
		e.report.add(observation{kind: kindWatchGone, key: normalize(gone), detail: gone})
		t.Logf("resumed watch: %s", gone)
		return
	}
	from, _ := strconv.ParseInt(m[1], 10, 64)
	to, _ := strconv.ParseInt(m[2], 10, 64)
	h, err := readHistory(ctx, e.store.endpoints(), from+1, to)
	if err != nil {
		t.Errorf("resumed watch: %s; reading the store's history: %v", gone, err)
		return
	}
	detail := gone + "; " + h.String()
	t.Logf("resumed watch: %s", detail)
	switch {
	case len(h.writes) == 0:
		e.report.add(observation{kind: kindWatchGone, key: "410 after a restart over revisions that hold no write", detail: detail})
	case len(h.empty) > 0:
		e.report.note("410 after a restart, over writes and also revisions that hold no write: " + detail)
	}
}

// noWriteRevisions looks at the store's revisions since the watch's
// resourceVersion before the restarts. Over etcd every revision holds a
// write. A revision that holds none, dealt while kube-apiserver starts,
// makes a watch cache that lists after it start past every
// resourceVersion a client saw: the client's resumed watch gets 410.
// Whether it does depends on the order of the apiserver's start-up
// requests, so the revisions are what is kept, with the requests that
// took them.
func noWriteRevisions(t *testing.T, ctx context.Context, e *env, since string) {
	t.Helper()
	from, _ := strconv.ParseInt(since, 10, 64)
	to, err := storeRevision(ctx, e.store.endpoints())
	if err != nil {
		t.Errorf("store revision: %v", err)
		return
	}
	h, err := readHistory(ctx, e.store.endpoints(), from+1, to)
	if err != nil {
		t.Errorf("reading the store's history: %v", err)
		return
	}
	if len(h.empty) == 0 {
		return
	}
	each, _ := e.trace.explain(h.empty)
	t.Logf("revisions %d..%d: %d hold no write:\n\t%s", h.from, h.to, len(h.empty), strings.Join(each, "\n\t"))
	e.report.add(observation{kind: kindNoWrite, key: "revisions that hold no write while kube-apiserver restarts",
		detail: fmt.Sprintf("revisions %d..%d: %d writes, %d revisions without one: %s", h.from, h.to, len(h.writes), len(h.empty), strings.Join(each, "; "))})
}

// checkCompaction waits until kube-apiserver's compaction (every 10 s
// here) has passed the resourceVersion of the setup's first list: a list
// at that exact resourceVersion must then answer 410 Expired, as etcd
// does, and the store go on serving lists and watches.
func checkCompaction(t *testing.T, e *env) {
	ctx := timeout(t, 2*time.Minute)
	cms := e.cs.CoreV1().ConfigMaps("kube-list")
	var err error
	began := time.Now()
	for time.Since(began) < 90*time.Second {
		_, err = cms.List(ctx, metav1.ListOptions{ResourceVersion: e.firstRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 1})
		if err != nil {
			break
		}
		sleep(ctx, time.Second)
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("list at the first resourceVersion %s after %v: want 410 Expired, got %v", e.firstRV, time.Since(began).Round(time.Second), err)
	}
	e.answer("list at a compacted exact resourceVersion", err)
	t.Logf("compacted past %s after %v more", e.firstRV, time.Since(began).Round(time.Second))

	list, err := cms.List(ctx, metav1.ListOptions{Limit: 10})
	if err != nil || len(list.Items) != 10 || list.Continue == "" {
		t.Fatalf("list after compaction: %v %v", names(list), err)
	}
	w := startWatch(ctx, cms.Watch, list.ResourceVersion, 30)
	cm, err := cms.Create(ctx, configMap("after-compaction", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create after compaction: %v", err)
	}
	want := []expect{{watch.Added, cm.Name, rvOf(cm)}}
	if s, ok := w.await(30*time.Second, func(s watchState) bool { return matchEvents(s.events, want) == "" }); !ok {
		t.Errorf("watch after compaction: %s (%v %v)", matchEvents(s.events, want), s.gone, s.errs)
	}
	next, err := cms.List(ctx, metav1.ListOptions{Limit: 10, Continue: list.Continue})
	if err != nil || len(next.Items) != 10 {
		t.Errorf("next page after compaction: %v %v", names(next), err)
	}
}
