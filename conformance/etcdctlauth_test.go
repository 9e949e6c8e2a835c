package conformance

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/axon-kv/axon/internal/testpki"
)

// etcdctlAuthSteps are what an operator types to set auth up and what
// users then do with it: [stdin, args...] (stdin for `user passwd`).
var etcdctlAuthSteps = [][]string{
	{"", "auth", "enable"},
	{"", "user", "add", "root", "--new-user-password=rootpw"},
	{"", "role", "add", "app"},
	{"", "role", "add", "app"},
	{"", "role", "grant-permission", "app", "readwrite", "/app/", "--prefix"},
	{"", "role", "grant-permission", "app", "read", "/ro"},
	{"", "role", "grant-permission", "app", "write", "/from", "--from-key"},
	{"", "role", "grant-permission", "nope", "read", "/x"},
	{"", "user", "add", "alice", "--new-user-password=alicepw"},
	{"", "user", "add", "bob", "--no-password"},
	{"", "user", "grant-role", "alice", "app"},
	{"", "user", "grant-role", "alice", "nope"},
	{"", "role", "get", "app"},
	{"", "user", "get", "alice", "--detail"},
	{"", "user", "list"},
	{"", "role", "list"},
	// etcdctl adds the root role and grants it to root, then enables.
	{"", "auth", "enable"},
	{"", "auth", "enable"},
	{"", "put", "/app/x", "1"},
	{"", "--user", "alice:alicepw", "put", "/app/x", "1"},
	{"", "--user", "alice:alicepw", "get", "/app/x"},
	{"", "--user", "alice:alicepw", "put", "/ro", "v"},
	{"", "--user", "alice:alicepw", "get", "/ro"},
	{"", "--user", "alice:alicepw", "put", "/fromz", "v"},
	{"", "--user", "alice:alicepw", "get", "/fromz"},
	{"", "--user", "alice:wrong", "get", "/app/x"},
	{"", "--user", "nobody:x", "get", "/app/x"},
	{"", "--user", "alice:alicepw", "get", "/", "--prefix"},
	{"", "--user", "alice:alicepw", "del", "/app/", "--prefix"},
	{"", "--user", "alice:alicepw", "txn"},
	{"", "--user", "alice:alicepw", "compaction", "1"},
	{"", "--user", "alice:alicepw", "user", "list"},
	{"", "--user", "alice:alicepw", "alarm", "list"},
	{"", "--user", "alice:alicepw", "defrag"},
	{"", "--user", "root:rootpw", "auth", "status"},
	{"", "--user", "root:rootpw", "user", "list"},
	{"", "--user", "root:rootpw", "role", "revoke-permission", "app", "/ro"},
	{"", "--user", "alice:alicepw", "get", "/ro"},
	{"alicepw2\n", "--user", "root:rootpw", "user", "passwd", "alice", "--interactive=false"},
	{"", "--user", "alice:alicepw", "get", "/app/x"},
	{"", "--user", "alice:alicepw2", "get", "/app/x"},
	{"", "--user", "root:rootpw", "user", "revoke-role", "alice", "app"},
	{"", "--user", "alice:alicepw2", "get", "/app/x"},
	{"", "--user", "root:rootpw", "user", "delete", "root"},
	{"", "--user", "root:rootpw", "role", "delete", "app"},
	{"", "--user", "root:rootpw", "user", "delete", "alice"},
	{"", "--user", "root:rootpw", "auth", "disable"},
	{"", "get", "/app/x"},
	{"", "auth", "status"},
}

// etcdctlNoise are etcdctl's own log lines; etcdctlVolatile what differs
// between two runs by nature (the endpoint, how long a call took).
var (
	etcdctlNoise    = regexp.MustCompile(`(?m)^\{"level".*$\n?`)
	etcdctlVolatile = regexp.MustCompile(`member\[[^\]]*\]\. took [^ ]*\.`)
)

// renderEtcdctl runs a step and renders what etcdctl printed.
func renderEtcdctl(c *ctl, step []string) string {
	out, errOut, err := c.run(step[0], step[1:]...)
	errOut = strings.TrimSpace(etcdctlNoise.ReplaceAllString(errOut, ""))
	errOut = etcdctlVolatile.ReplaceAllString(errOut, "member[*]. took *.")
	return fmt.Sprintf("$ etcdctl %s\nexit error=%v\n%s\n%s", strings.Join(step[1:], " "), err != nil, strings.TrimSpace(out), errOut)
}

// TestEtcdctlAuthScript sets auth up with the real etcdctl and uses it
// as users would, on Axon (one instance, and a follower of three over
// mock TiKV) and on embedded etcd, and compares what etcdctl printed.
func TestEtcdctlAuthScript(t *testing.T) {
	runEtcdctlAuthScript(t, backendOptions{})
}

// TestEtcdctlAuthScriptJWT is the script with --auth-token jwt (ES256,
// keys in files both sides read).
func TestEtcdctlAuthScriptJWT(t *testing.T) {
	k := testpki.NewSigningKey(t, t.TempDir(), "ES256")
	runEtcdctlAuthScript(t, backendOptions{authToken: "jwt,pub-key=" + k.PubFile + ",priv-key=" + k.PrivFile + ",sign-method=ES256"})
}

func runEtcdctlAuthScript(t *testing.T, opts backendOptions) {
	bin := buildEtcdctl(t)
	transcripts := map[string][]string{}
	for _, b := range backends {
		if b.name == "axon-mtls" {
			continue // with --client-cert-auth etcd takes the certificate's CN as the user: not implemented
		}
		t.Run(b.name, func(t *testing.T) {
			c := b.start(t, opts)
			ctl := &ctl{t: t, backend: b.name, bin: bin, endpoint: c.Endpoints()[0]}
			for _, step := range etcdctlAuthSteps {
				transcripts[b.name] = append(transcripts[b.name], renderEtcdctl(ctl, step))
			}
		})
	}
	want := transcripts["etcd"]
	for name, got := range transcripts {
		if name == "etcd" {
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d steps ran, etcd %d", name, len(got), len(want))
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s, step %d:\n--- etcd\n%s\n--- %s\n%s", name, i, want[i], name, got[i])
			}
		}
	}
}
