package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/etcdtest"
)

// healthPaths are what probes and operators ask of a member's health.
var healthPaths = []string{
	"/health", "/health?serializable=true", "/health?exclude=NOSPACE",
	"/livez", "/livez?verbose", "/livez/serializable_read",
	"/readyz", "/readyz?verbose", "/readyz/linearizable_read", "/readyz?exclude=linearizable_read&verbose",
}

// TestHealthUnderAuthAgainstEtcd starts `axon serve` and etcd 3.7.3 with
// and without a metrics listener, turns auth on, and asks both ports of
// each for /health, /livez and /readyz: auth leaves a member healthy (a
// liveness probe must not restart it for that), and an alarm still makes
// /health unhealthy, as on etcd.
func TestHealthUnderAuthAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary and etcd")
	}
	bin := buildAxon(t)
	for _, withMetrics := range []bool{true, false} {
		t.Run(fmt.Sprintf("metrics-listener=%v", withMetrics), func(t *testing.T) {
			var transcripts [2][]string
			for i, sys := range []string{"etcd", "axon"} {
				transcripts[i] = probeHealth(t, sys, bin, withMetrics)
			}
			etcdtest.Compare(t, transcripts[0], transcripts[1])
		})
	}
}

func probeHealth(t *testing.T, sys, bin string, withMetrics bool) []string {
	client, peer := freeAddr(t), "http://"+freeAddr(t)
	args := []string{"--listen-client-urls", "http://" + client}
	ports := []string{client}
	if withMetrics {
		metrics := freeAddr(t)
		args = append(args, "--listen-metrics-urls", "http://"+metrics)
		ports = append(ports, metrics)
	} else if sys == "axon" {
		args = append(args, "--listen-metrics-urls", "") // none, as etcd's default
	}
	if sys == "etcd" {
		args = append(args, "--advertise-client-urls", "http://"+client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer)
	}
	s := startProcess(t, sys, bin, args...)
	if !s.awaitHealthy(t, "http://"+client+"/health") {
		t.Fatalf("%s did not start:\n%s", sys, s.out.String())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	enableAuth(ctx, t, client)
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, Username: "root", Password: "rootpw", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	var out []string
	ask := func(stage string) {
		for i, port := range ports {
			for _, path := range healthPaths {
				out = append(out, fmt.Sprintf("%s, port %d, %s: %s", stage, i, path, healthAnswer(ctx, t, "http://"+port+path)))
			}
		}
	}
	ask("auth on")
	st, err := root.Status(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewMaintenanceClient(root.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	ask("NOSPACE raised")
	// etcd counts every named check it ran, by kind and outcome.
	metrics := healthAnswer(ctx, t, "http://"+client+"/metrics")
	for _, line := range strings.Split(metrics, " | ") {
		if strings.HasPrefix(line, "etcd_server_healthcheck") {
			out = append(out, "metrics: "+line)
		}
	}
	return out
}

// enableAuth adds root with the root role and turns auth on.
func enableAuth(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}

// healthAnswer is the status and body of GET url, the body's lines
// sorted: etcd lists its checks in map order.
func healthAnswer(ctx context.Context, t *testing.T, url string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(lines)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.Join(lines, " | "))
}
