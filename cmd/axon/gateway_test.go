package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/internal/testpki"
)

// gatewayStep is one request to the JSON gateway; "{lease}" in body is
// the ID the last lease grant returned.
type gatewayStep struct {
	path, body string
}

// gatewaySteps are etcd's documented curl examples (etcd.io, "Why gRPC
// gateway"), the rest of the paths the issue names, and bad input.
var gatewaySteps = []gatewayStep{
	{"/v3/kv/put", `{"key": "Zm9v", "value": "YmFy"}`},
	{"/v3/kv/range", `{"key": "Zm9v"}`},
	{"/v3/kv/range", `{"key": "Zm9v", "range_end": "Zm9w", "count_only": true}`},
	{"/v3/kv/put", `{"key": "Zm9v", "value": "YmF6", "prev_kv": true}`},
	// The docs' txn, in their camelCase field names.
	{"/v3/kv/txn", `{"compare":[{"target":"CREATE","key":"Zm9v","createRevision":"2"}],"success":[{"requestPut":{"key":"Zm9v","value":"YmFy"}}]}`},
	{"/v3/kv/txn", `{"compare":[{"target":"VALUE","key":"Zm9v","value":"bm9wZQ=="}],"success":[{"request_put":{"key":"Zm9v","value":"eA=="}}],"failure":[{"request_range":{"key":"Zm9v"}}]}`},
	{"/v3/lease/grant", `{"TTL": 30, "ID": 0}`},
	{"/v3/kv/put", `{"key": "a2V5", "value": "dg==", "lease": "{lease}"}`},
	{"/v3/kv/range", `{"key": "a2V5", "keys_only": true}`},
	{"/v3/lease/timetolive", `{"ID": "{lease}", "keys": true}`},
	{"/v3/lease/leases", `{}`},
	{"/v3/lease/keepalive", `{"ID": "{lease}"}`},
	{"/v3/lease/revoke", `{"ID": "{lease}"}`},
	{"/v3/kv/range", `{"key": "a2V5"}`},
	{"/v3/kv/deleterange", `{"key": "Zm9v", "prev_kv": true}`},
	{"/v3/kv/put", `{"key": "Zm9v", "value": "YQ=="}`},
	{"/v3/kv/compaction", `{"revision": 7, "physical": true}`},
	{"/v3/kv/range", `{"key": "Zm9v", "revision": 3}`},
	{"/v3/kv/range", `{"key": "Zm9v", "revision": 99}`},
	{"/v3/maintenance/status", `{}`},
	{"/v3/cluster/member/list", `{}`},
	{"/v3beta/kv/range", `{"key": "Zm9v"}`},
	// Bad input: etcd's words and codes, through the gateway.
	{"/v3/kv/put", `{"value": "YmFy"}`},
	{"/v3/kv/range", `{"key": "Zm9v", "sort_order": "SIDEWAYS"}`},
	{"/v3/kv/range", `{"key": `},
	{"/v3/lease/revoke", `{"ID": 12345}`},
	{"/v3/kv/nope", `{}`},
}

// volatile are fields whose values differ between two stores by nature
// (identities, versions, sizes, terms); they are compared for presence.
var volatile = map[string]bool{
	"cluster_id": true, "member_id": true, "raft_term": true, "ID": true, "lease": true, "leader": true,
	"dbSize": true, "dbSizeInUse": true, "dbSizeQuota": true, "raftIndex": true,
	"raftTerm": true, "raftAppliedIndex": true, "storageVersion": true, "name": true, "peerURLs": true,
	"clientURLs": true, "TTL": true, "grantedTTL": true, "token": true, "hash": true,
}

// normalize re-renders a JSON body with volatile values as "*" and
// object keys sorted; a body that is not JSON is kept as text. A
// top-level "version" is the server's (Status); deeper, a key's.
func normalize(body []byte) string {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return strings.TrimSpace(string(body))
	}
	if top, ok := v.(map[string]any); ok && top["version"] != nil {
		top["version"] = "*"
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if volatile[k] || k == "version" && e == "*" {
					x[k] = "*"
				} else {
					x[k] = walk(e)
				}
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	b, _ := json.Marshal(walk(v))
	return string(b)
}

// runGateway sends the steps to base and renders each answer.
func runGateway(t *testing.T, hc *http.Client, base string) []string {
	t.Helper()
	var out []string
	lease := "0"
	for _, s := range gatewaySteps {
		resp, err := hc.Post(base+s.path, "application/json", strings.NewReader(strings.ReplaceAll(s.body, "{lease}", lease)))
		if err != nil {
			t.Fatalf("%s: %v", s.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", s.path, err)
		}
		if s.path == "/v3/lease/grant" {
			var g struct{ ID string }
			if err := json.Unmarshal(body, &g); err != nil || g.ID == "" {
				t.Fatalf("lease grant answered %s (%v)", body, err)
			}
			lease = g.ID
		}
		out = append(out, fmt.Sprintf("%s %s -> %d %s", s.path, s.body, resp.StatusCode, normalize(body)))
	}
	return out
}

// TestGatewayMatchesEtcd sends etcd's curl examples and bad input to
// Axon's JSON gateway and to an embedded etcd's, and compares status
// codes and bodies (identities, versions and sizes for presence only).
func TestGatewayMatchesEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	addr := freeAddr(t)
	serveInProcess(t, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr, "--listen-metrics-urls", "http://"+freeAddr(t))
	awaitPut(t, tlsClient(t, addr, nil))
	// awaitPut wrote revision 2; give etcd the same.
	awaitPut(t, tlsClient(t, etcd.Host, nil))

	hc := &http.Client{Timeout: 10 * time.Second}
	want := runGateway(t, hc, "http://"+etcd.Host)
	got := runGateway(t, hc, "http://"+addr)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n axon %s\n etcd %s", i, got[i], want[i])
		}
	}

	for _, path := range []string{"/version", "/health", "/health?serializable=true"} {
		for name, base := range map[string]string{"axon": "http://" + addr, "etcd": "http://" + etcd.Host} {
			resp, err := hc.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var m map[string]string
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil {
				t.Errorf("%s %s: %d %s", name, path, resp.StatusCode, body)
				continue
			}
			if path == "/version" && (m["etcdserver"] == "" || m["etcdcluster"] == "") {
				t.Errorf("%s /version: %s", name, body)
			}
			if strings.HasPrefix(path, "/health") && (m["health"] != "true" || len(m) != 2) {
				t.Errorf("%s %s: %s", name, path, body)
			}
		}
	}
}

// TestGatewayWatchStreams opens a watch over /v3/watch on Axon and on
// etcd, writes to the key through the gateway and compares the streams.
func TestGatewayWatchStreams(t *testing.T) {
	etcd := etcdtest.Start(t)
	addr := freeAddr(t)
	serveInProcess(t, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr, "--listen-metrics-urls", "http://"+freeAddr(t))
	awaitPut(t, tlsClient(t, addr, nil))
	awaitPut(t, tlsClient(t, etcd.Host, nil))
	stream := func(base string) []string {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v3/watch",
			strings.NewReader(`{"create_request": {"key": "d2F0Y2g=", "prev_kv": true}}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		var out []string
		next := func() {
			if !lines.Scan() {
				t.Fatalf("%s: the watch stream ended: %v", base, lines.Err())
			}
			out = append(out, normalize(lines.Bytes()))
		}
		next() // created
		for _, v := range []string{"MQ==", "Mg=="} {
			r, err := http.Post(base+"/v3/kv/put", "application/json", strings.NewReader(`{"key": "d2F0Y2g=", "value": "`+v+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			next()
		}
		return out
	}
	want, got := stream("http://"+etcd.Host), stream("http://"+addr)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("watch streams differ:\n axon %s\n etcd %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
	if len(got) != 3 || !strings.Contains(got[2], `"prev_kv"`) {
		t.Errorf("axon's stream: %q", got)
	}
}

// TestGatewayOnTheTLSPort serves gRPC, HTTP/1.1 and HTTP/2 JSON on one
// https port with client certificates required, and HTTP/2 without TLS
// (prior knowledge) on a plaintext port beside it.
func TestGatewayOnTheTLSPort(t *testing.T) {
	ca := testpki.NewCA(t, "axon-ca")
	srvCert, srvKey := ca.Issue(t, 20, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.Issue(t, 21, x509.ExtKeyUsageClientAuth)
	dir := testpki.WriteFiles(t, t.TempDir(), map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert, "server-key.pem": srvKey})
	addr, plain := freeAddr(t), freeAddr(t)
	serveInProcess(t, "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+addr+",http://"+plain, "--listen-metrics-urls", "http://"+freeAddr(t),
		"--cert-file", filepath.Join(dir, "server.pem"), "--key-file", filepath.Join(dir, "server-key.pem"),
		"--trusted-ca-file", filepath.Join(dir, "ca.pem"), "--client-cert-auth")
	cfg := &tls.Config{RootCAs: testpki.Pool(ca), Certificates: []tls.Certificate{testpki.Pair(t, cliCert, cliKey)}}
	awaitPut(t, tlsClient(t, addr, cfg))

	post := func(hc *http.Client, url, body string) (int, string, string) {
		t.Helper()
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Proto
	}
	var h1, h2, h2c http.Protocols
	h1.SetHTTP1(true)
	h2.SetHTTP2(true)
	h2c.SetUnencryptedHTTP2(true)
	clients := []struct {
		name, base, proto string
		hc                *http.Client
	}{
		{"https HTTP/1.1", "https://" + addr, "HTTP/1.1", &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &h1}}},
		{"https HTTP/2", "https://" + addr, "HTTP/2.0", &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &h2}}},
		{"h2c", "http://" + plain, "HTTP/2.0", &http.Client{Transport: &http.Transport{Protocols: &h2c}}},
	}
	for i, c := range clients {
		key := fmt.Sprintf(`"a%d"`, i)
		code, body, proto := post(c.hc, c.base+"/v3/kv/put", `{"key": `+jsonB64(key)+`, "value": "dg=="}`)
		if code != http.StatusOK || proto != c.proto {
			t.Errorf("%s put: %d %s over %s", c.name, code, body, proto)
		}
		code, body, _ = post(c.hc, c.base+"/v3/kv/range", `{"key": `+jsonB64(key)+`}`)
		if code != http.StatusOK || !strings.Contains(body, `"value":"dg=="`) {
			t.Errorf("%s range: %d %s", c.name, code, body)
		}
	}
	// No client certificate: refused at the handshake, as for gRPC.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: testpki.Pool(ca)}}}
	if resp, err := noCert.Post("https://"+addr+"/v3/kv/range", "application/json", strings.NewReader(`{}`)); err == nil {
		resp.Body.Close()
		t.Errorf("https without a client certificate answered %s", resp.Status)
	}
}

// jsonB64 is s's bytes in base64 as a JSON string.
func jsonB64(s string) string {
	b, _ := json.Marshal([]byte(s))
	return string(b)
}

// etcd3gwScript drives Debian's python3-etcd3gw 2.0 (OpenStack's
// gateway client) through puts, gets, a transaction, a lease with
// a key, a watch and deletes; it prints "ok" at the end.
const etcd3gwScript = `
import sys, threading
from etcd3gw.client import Etcd3Client
c = Etcd3Client(host="127.0.0.1", port=int(sys.argv[1]), api_path="/v3/")
assert c.status()["version"], "status"
assert len(c.members()) == 1, "members"
assert c.put("k1", "v1")
assert c.get("k1") == [b"v1"], c.get("k1")
assert c.create("k2", "v2") is True
assert c.create("k2", "v3") is False
assert c.replace("k2", "v2", "v4") is True
assert c.get("k2") == [b"v4"]
lease = c.lease(ttl=30)
assert c.put("leased", "x", lease=lease)
assert lease.ttl() > 0
assert lease.keys() == [b"leased"], lease.keys()
assert lease.refresh() > 0
assert lease.revoke()
assert c.get("leased") == []
assert [v for v, _ in c.get_prefix("k")] == [b"v1", b"v4"]
got = []
events, cancel = c.watch("w")
def reader():
    for e in events:
        got.append(e)
        if e["kv"].get("value") == b"last":
            break
t = threading.Thread(target=reader)
t.start()
import time
for i in range(50):
    c.put("w", "a%d" % i)
    if got:
        break
    time.sleep(0.1)
c.put("w", "last")
t.join(10)
cancel()
assert len(got) >= 2 and got[-1]["kv"]["value"] == b"last", got
assert c.delete_prefix("k") is True
assert c.get_prefix("k") == []
assert [v for v, _ in c.get_all()] == [b"last"], c.get_all()
print("ok")
`

// TestGatewayPythonEtcd3gw runs python-etcd3gw against an embedded etcd
// (which shows the script right) and against Axon. Without the package
// the test skips, unless AXON_REQUIRE_ETCD3GW is set (.ci/run).
func TestGatewayPythonEtcd3gw(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import etcd3gw").Run(); err != nil {
		if os.Getenv("AXON_REQUIRE_ETCD3GW") != "" {
			t.Fatalf("python3-etcd3gw is required here: %v", err)
		}
		t.Skip("python3-etcd3gw is not installed (apt-get install python3-etcd3gw)")
	}
	addr := freeAddr(t)
	serveInProcess(t, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr, "--listen-metrics-urls", "http://"+freeAddr(t))
	for name, addr := range map[string]string{"etcd": etcdtest.Start(t).Host, "axon": addr} {
		awaitPut(t, tlsClient(t, addr, nil))
		port := addr[strings.LastIndex(addr, ":")+1:]
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", etcd3gwScript, port)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil || strings.TrimSpace(out.String()) != "ok" {
			t.Errorf("python-etcd3gw against %s: %v\n%s", name, err, out.String())
		}
	}
}
