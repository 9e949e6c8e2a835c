package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/axon-kv/axon/internal/etcdtest"
)

// authStep is one gateway request sent as a user: "" for no token,
// "bad" for a forged one, else a user whose token (fresh from
// /v3/auth/authenticate) goes in the Authorization header.
type authStep struct {
	as, path, body string
}

var gatewayAuthSteps = []authStep{
	{"", "/v3/auth/user/add", `{"name": "root", "password": "rootpw"}`},
	{"", "/v3/auth/enable", `{}`},
	{"", "/v3/auth/user/grant", `{"user": "root", "role": "root"}`},
	{"", "/v3/auth/user/add", `{"name": "alice", "password": "alicepw"}`},
	{"", "/v3/auth/user/add", `{"name": "bob", "options": {"no_password": true}}`},
	{"", "/v3/auth/role/add", `{"name": "r1"}`},
	{"", "/v3/auth/role/grant", `{"name": "r1", "perm": {"permType": "READWRITE", "key": "YQ==", "range_end": "Yw=="}}`},
	{"", "/v3/auth/role/grant", `{"name": "r1", "perm": {"permType": "READ", "key": "aw=="}}`},
	{"", "/v3/auth/user/grant", `{"user": "alice", "role": "r1"}`},
	{"", "/v3/auth/enable", `{}`},
	{"", "/v3/auth/status", `{}`},
	{"", "/v3/kv/range", `{"key": "YQ=="}`},
	{"bad", "/v3/kv/range", `{"key": "YQ=="}`},
	{"", "/v3/cluster/member/list", `{}`},
	{"bad", "/v3/cluster/member/list", `{}`},
	{"", "/v3/auth/authenticate", `{"name": "alice", "password": "nope"}`},
	{"", "/v3/auth/authenticate", `{"name": "bob", "password": "x"}`},
	{"alice", "/v3/kv/put", `{"key": "YTE=", "value": "dg=="}`},
	{"alice", "/v3/kv/range", `{"key": "YQ==", "range_end": "Yw=="}`},
	{"alice", "/v3/kv/put", `{"key": "aw==", "value": "dg=="}`},
	{"alice", "/v3/kv/range", `{"key": "aw=="}`},
	{"alice", "/v3/kv/txn", `{"compare":[{"target":"VALUE","key":"aw==","value":"dg=="}],"success":[{"request_put":{"key":"YTI=","value":"dg=="}}]}`},
	{"alice", "/v3/kv/deleterange", `{"key": "eg=="}`},
	{"alice", "/v3/lease/grant", `{"TTL": 30}`},
	{"alice", "/v3/maintenance/status", `{}`},
	{"alice", "/v3/maintenance/hash", `{}`},
	{"alice", "/v3/auth/user/list", `{}`},
	{"alice", "/v3/auth/user/get", `{"name": "alice"}`},
	{"alice", "/v3/auth/role/get", `{"role": "r1"}`},
	{"root", "/v3/auth/user/list", `{}`},
	{"root", "/v3/auth/role/list", `{}`},
	{"root", "/v3/auth/role/get", `{"role": "r1"}`},
	{"root", "/v3/auth/role/revoke", `{"role": "r1", "key": "aw=="}`},
	{"alice", "/v3/kv/range", `{"key": "aw=="}`},
	{"root", "/v3/auth/user/changepw", `{"name": "alice", "password": "alicepw"}`},
	{"root", "/v3/auth/user/revoke", `{"name": "alice", "role": "r1"}`},
	{"root", "/v3/auth/role/delete", `{"role": "r1"}`},
	{"root", "/v3/auth/user/delete", `{"name": "bob"}`},
	{"root", "/v3/auth/user/delete", `{"name": "root"}`},
	{"root", "/v3/kv/compaction", `{"revision": 2}`},
	{"root", "/v3/auth/disable", `{}`},
	{"", "/v3/kv/range", `{"key": "YQ==", "count_only": true}`},
	{"", "/v3/auth/status", `{}`},
}

// runGatewayAuth sends the steps to base and renders each answer.
func runGatewayAuth(t *testing.T, base string) []string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body, token string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode, b
	}
	var out []string
	for _, s := range gatewayAuthSteps {
		token := ""
		switch s.as {
		case "":
		case "bad":
			token = "forged.token"
		default:
			_, b := post("/v3/auth/authenticate", fmt.Sprintf(`{"name": %q, "password": %q}`, s.as, s.as+"pw"), "")
			var r struct{ Token string }
			if err := json.Unmarshal(b, &r); err != nil || r.Token == "" {
				t.Fatalf("authenticate %s: %s", s.as, b)
			}
			token = r.Token
		}
		code, body := post(s.path, s.body, token)
		out = append(out, fmt.Sprintf("as %q %s %s -> %d %s", s.as, s.path, s.body, code, normalize(body)))
	}
	return out
}

// TestGatewayAuthMatchesEtcd sets auth up and uses it through the JSON
// gateway (/v3/auth/* and the Authorization header) of Axon and of an
// embedded etcd, and compares status codes and bodies.
func TestGatewayAuthMatchesEtcd(t *testing.T) {
	etcd := etcdtest.StartWith(t, func(cfg *embed.Config) { cfg.BcryptCost = 4 })
	addr := freeAddr(t)
	serveInProcess(t, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr, "--listen-metrics-urls", "http://"+freeAddr(t), "--bcrypt-cost", "4")
	awaitPut(t, tlsClient(t, addr, nil))
	awaitPut(t, tlsClient(t, etcd.Host, nil))
	want := runGatewayAuth(t, "http://"+etcd.Host)
	got := runGatewayAuth(t, "http://"+addr)
	if len(got) != len(want) {
		t.Fatalf("axon gave %d answers, etcd %d", len(got), len(want))
	}
	if testing.Verbose() {
		t.Logf("etcd:\n%s", strings.Join(want, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n axon %s\n etcd %s", i, got[i], want[i])
		}
	}
}
