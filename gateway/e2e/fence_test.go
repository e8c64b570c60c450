package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// Replica a is cut off from the Redis that replica b still reaches, in
// the middle of a turn whose agent keeps producing. a's lease lapses and b
// takes the session over, starting an agent of its own for the next
// prompt: by then a's agent is frozen, and once a reaches Redis again and
// finds the lease b's, a's agent is killed. (Before, a's agent ran on
// beside b's, free to act in the workspace, until a reached Redis again.)
func TestPartitionedReplicaFencesItsAgent(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	rs := testutil.StartRedis(t)
	proxy := testutil.StartTCPProxy(t, rs.URL()[len("redis://"):len(rs.URL())-len("/0")])
	// b's agent first notes how a's agent is (its /proc files) as it starts.
	dir := t.TempDir()
	pidFile, seen := filepath.Join(dir, "a-agent-pid"), filepath.Join(dir, "seen")
	note := `pid=$(cat "$0"); cat /proc/$pid/stat > "$1.stat" 2>/dev/null; cat /proc/$pid/status > "$1.status" 2>/dev/null; shift; exec "$@"`
	a := startReplicaAt(t, "redis://"+proxy.Addr()+"/0", map[string][]string{"flood": floodAgent(t, 300, 10, 100*time.Millisecond)}, ttl)
	b := startReplicaAt(t, rs.URL(), map[string][]string{"flood": append([]string{"/bin/sh", "-c", note, pidFile, seen},
		agentCommand(t, agentsim.Script{ProtocolVersion: 1})...)}, ttl)

	before := childProcesses()
	id := a.create(t, "flood")
	aAgent := newChild(t, before)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(aAgent)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := make(chan struct{})
	turnDone := make(chan struct{})
	go func() {
		defer close(turnDone)
		// It ends when a lets the session go.
		_, _ = testutil.Turn(ctx, a.connect, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}, atRound(2, func() {
			proxy.Cut()
			close(cut)
		}))
	}()
	<-cut

	// b forwards to a while a's lease lives (a's turn is busy), then takes
	// the session over and starts its agent.
	testutil.WaitFor(t, "b to take the session over and run a turn", func() bool {
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		defer tcancel()
		_, err := testutil.Turn(tctx, b.connect, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}, nil)
		return err == nil
	})
	stat, _ := os.ReadFile(seen + ".stat")
	status, _ := os.ReadFile(seen + ".status")
	if !testutil.StoppedIn(string(stat), string(status)) {
		t.Fatalf("a's agent ran as b's agent started: %s", stat)
	}
	if n := testutil.MetricSum(t, a.metrics.Registry(), "acp_gateway_agents_fenced_total", "action=freeze"); n == 0 {
		t.Error("a counted no agent frozen")
	}

	proxy.Restore()
	testutil.WaitFor(t, "a's agent to be killed", func() bool { return !procfs.Alive(aAgent) })
	<-turnDone
	if n := testutil.MetricSum(t, a.metrics.Registry(), "acp_gateway_agents_fenced_total", "action=kill"); n == 0 {
		t.Error("a counted no agent killed")
	}
	if st := snapshot(t, b, id).GetState(); st != "ready" {
		t.Errorf("the session is %q on b, want ready", st)
	}
}
