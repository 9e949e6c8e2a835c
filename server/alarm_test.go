package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/server"
)

// alarmSteps raise and disarm NOSPACE for members 0 and 42 (neither the
// server's own) and list the alarms after each step.
func alarmSteps(t *testing.T, addr string) []string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := pb.NewMaintenanceClient(conn)
	ctx := ctxT(t)
	// etcd lists alarms in its map's order: compared in member order.
	render := func(as []*pb.AlarmMember) string {
		var out []string
		for _, a := range as {
			out = append(out, fmt.Sprintf("%d:%s", a.MemberID, a.Alarm))
		}
		slices.Sort(out)
		return fmt.Sprint(out)
	}
	var out []string
	for _, step := range []struct {
		action pb.AlarmRequest_AlarmAction
		member uint64
	}{
		{pb.AlarmRequest_ACTIVATE, 0}, {pb.AlarmRequest_ACTIVATE, 42}, {pb.AlarmRequest_ACTIVATE, 0},
		{pb.AlarmRequest_DEACTIVATE, 0}, {pb.AlarmRequest_DEACTIVATE, 0}, {pb.AlarmRequest_DEACTIVATE, 42},
	} {
		r, err := m.Alarm(ctx, &pb.AlarmRequest{Action: step.action, MemberID: step.member, Alarm: pb.AlarmType_NOSPACE})
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Alarm(context.Background(), &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		if err != nil {
			t.Fatal(err)
		}
		_, perr := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		out = append(out, fmt.Sprintf("%s %d -> %s; list %s; put: %v", step.action, step.member, render(r.Alarms), render(l.Alarms), perr))
	}
	return out
}

// TestAlarmsKeepTheMemberTheRequestNames: an alarm raised for member 0
// is kept under 0, beside another member's, as etcd keeps it (python-etcd3
// raises alarms for member 0).
func TestAlarmsKeepTheMemberTheRequestNames(t *testing.T) {
	want := alarmSteps(t, etcdtest.Start(t).Host)
	_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "alarms"})
	got := alarmSteps(t, cli.Endpoints()[0])
	t.Logf("etcd: %q", want)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n etcd %s\n axon %s", i, want[i], got[i])
		}
	}
}
