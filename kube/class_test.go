package kube

import "testing"

// TestFaultClass: what a killed store member's in-flight request gives
// compares by class, from the texts etcd and Axon gave in real runs;
// anything else still compares by its text.
func TestFaultClass(t *testing.T) {
	etcd := []observation{
		{kind: kindKlogError, phase: "leader_faults: after kill", detail: `E1123 22:47:00.021251   26536 status.go:71] "Unhandled Error" err="apiserver received an error that is not an metav1.Status: rpctypes.EtcdError{code:0xe, desc:\"etcdserver: request timed out, possibly due to previous leader failure\"}: etcdserver: request timed out, possibly due to previous leader failure" logger="UnhandledError"`},
		{kind: kindHTTP5xx, phase: "leader_faults: restart member", detail: `PUT /apis/coordination.k8s.io/v1/namespaces/kube-faults/leases/node-2: 500 : etcdserver: request timed out`},
		{kind: kindFaultWrite, phase: "leader_faults: restart member", detail: `renew lease: etcdserver: request timed out`},
		{kind: kindMetrics5xx, phase: "end", key: "verb=PUT group=coordination.k8s.io resource=leases code=500"},
	}
	axon := []observation{
		{kind: kindKlogError, phase: "leader_faults: kill leader", detail: `E1123 22:48:41.273517   26589 status.go:71] "Unhandled Error" err="apiserver received an error that is not an metav1.Status: &status.Error{s:(*status.Status)(0x6239016eef0)}: rpc error: code = Unavailable desc = error reading from server: EOF" logger="UnhandledError"`},
		{kind: kindHTTP5xx, phase: "leader_faults: kill leader", detail: `PATCH /api/v1/namespaces/kube-faults/configmaps/w-0107: 500 : rpc error: code = Unavailable desc = error reading from server: EOF`},
		{kind: kindFaultWrite, phase: "leader_faults: kill leader", detail: `patch configmaps/w-0107: rpc error: code = Unavailable desc = error reading from server: EOF`},
		{kind: kindMetrics5xx, phase: "end", key: "verb=PATCH resource=configmaps code=500"},
	}
	// What Axon gave in a run of 2026-11-25: requests a leader held when a
	// takeover after the kill cut it off.
	for _, o := range []observation{
		{kind: kindKlogError, phase: "leader_faults: after kill", detail: `E1125 11:05:50.391879   24596 status.go:71] "Unhandled Error" err="apiserver received an error that is not an metav1.Status: rpctypes.EtcdError{code:0xe, desc:\"etcdserver: leader changed\"}: etcdserver: leader changed" logger="UnhandledError"`},
		{kind: kindHTTP5xx, phase: "leader_faults: after kill", detail: `POST /api/v1/namespaces/kube-faults/configmaps: 500 : etcdserver: leader changed`},
		{kind: kindFaultWrite, phase: "leader_faults: after kill", detail: `create configmaps/w-0120: etcdserver: leader changed`},
	} {
		if got := faultClass(o); got != o.kind+"\x00store request cut off by a killed member" {
			t.Errorf("%s: class %q, want the cut-off class", o.kind, got)
		}
	}
	for i, o := range axon {
		got, want := faultClass(o), faultClass(etcd[i])
		if got == "" || got != want {
			t.Errorf("%s: class %q, etcd's %q", o.kind, got, want)
		}
	}
	for _, o := range []observation{
		{kind: kindHTTP5xx, phase: "watch", detail: `GET /api/v1/configmaps: 500 : rpc error: code = Unavailable desc = error reading from server: EOF`},
		{kind: kindHTTP5xx, phase: "leader_faults: kill leader", detail: `GET /api/v1/configmaps: 500 : etcdserver: mvcc: database space exceeded`},
		{kind: kindFaultRead, phase: "leader_faults: kill leader", detail: `list configmaps: rpc error: code = Unavailable desc = error reading from server: EOF`},
		{kind: kindMetrics5xx, phase: "end", key: "verb=LIST resource=configmaps code=429"},
	} {
		if c := faultClass(o); c != "" {
			t.Errorf("%s in %s (%s): class %q, want none", o.kind, o.phase, o.detail, c)
		}
	}
}

// TestApiserverOwnCancels: the apiserver's cancels of its own requests
// compare as etcd's whatever its store's endpoints; another request's
// "context canceled" does not.
func TestApiserverOwnCancels(t *testing.T) {
	etcdAlso := map[string]bool{}
	for _, l := range etcdAlsoLogs {
		etcdAlso[normalizeKlog(l)] = true
	}
	for _, tc := range []struct {
		line string
		want bool
	}{
		// axon-tikv-procs, 2026-12-02, 300 ms into an apiserver start.
		{`E1202 13:48:29.152840   25114 watcher.go:458] failed to sync with latest state: context canceled`, true},
		// axon-tikv, 2026-12-02, at an apiserver stop: three endpoints.
		{`E1202 12:10:41.003117   24410 compact.go:207] etcd: endpoint ([http://127.0.0.1:40265 http://127.0.0.1:37285 http://127.0.0.1:45961]) compact failed: context canceled`, true},
		{`E1202 12:10:41.003117   24410 compact.go:207] etcd: endpoint ([http://127.0.0.1:40265]) compact failed: etcdserver: request timed out`, false},
		{`E1202 13:48:29.152840   25114 watcher.go:458] failed to sync with latest state: etcdserver: mvcc: required revision has been compacted`, false},
		{`E1202 13:48:29.152840   25114 cacher.go:480] failed to list: context canceled`, false},
	} {
		if got := etcdAlso[normalizeKlog(tc.line)]; got != tc.want {
			t.Errorf("%s: counted as etcd's %v, want %v", tc.line, got, tc.want)
		}
	}
}
