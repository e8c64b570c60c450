package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// turnGateway runs agents "deaf" (ignores session/cancel and goes quiet)
// and "slow" (a long turn that honours cancel), with the turn timeout
// given and a cancel grace of a minute, both on the gateway's fake clock:
// they pass when the test advances it.
func turnGateway(t *testing.T, turnTimeout time.Duration) *gateway {
	t.Helper()
	return startGateway(t, gatewayOpts{
		fakeClock: true,
		agents: map[string][]string{
			"deaf": agentCommand(t, agentsim.Script{Resume: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Hang: true}}}}}),
			"slow": agentCommand(t, agentsim.Script{Resume: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Sleep: agentsim.Duration(time.Minute)}}}}}),
		},
		configure: func(c *app.Config) {
			c.Session.TurnTimeout, c.Session.CancelGrace = turnTimeout, cancelGrace
		},
	})
}

// cancelGrace is turnGateway's cancel grace.
const cancelGrace = time.Minute

// graceOut moves g's fake clock past the cancel grace once the grace's
// timer is armed: the only timer of turnGateway's clock while a turn is
// being cancelled (no idle timeout, no permission request, no lease).
func graceOut(t *testing.T, g *gateway) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Errorf("the cancel grace was not armed: %v", err)
		return
	}
	g.clock.Advance(cancelGrace)
}

// lastTurnEnded runs a turn of session id, calling during (if set) once it
// started, and returns its turnEnded and whether the agent was lost.
func lastTurnEnded(t *testing.T, g *gateway, id string, during func()) (*acpv2.TurnEnded, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var once bool
	events, err := testutil.Turn(ctx, g.connect, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}, func(e *acpv2.SessionEvent) {
		if e.GetTurnStarted() != nil && during != nil && !once {
			once = true
			go during()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	lost := false
	for _, e := range events {
		if e.GetStateChanged().GetState() == string(statestore.StateAgentLost) {
			lost = true
		}
	}
	return events[len(events)-1].GetTurnEnded(), lost
}

func TestCancelIsEnforcedOnAnAgentThatIgnoresIt(t *testing.T) {
	t.Parallel()
	g := turnGateway(t, 0)
	id := g.create(t, "deaf")
	cancelTurn := func() {
		time.Sleep(100 * time.Millisecond)
		if _, err := g.connect.Cancel(context.Background(), connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
			t.Errorf("Cancel: %v", err)
		}
		graceOut(t, g) // armed as Cancel returns
	}
	end, lost := lastTurnEnded(t, g, id, cancelTurn)
	if end.GetStopReason() != "cancelled" || end.GetCause() != "cancel_timeout" || end.GetError() != "" {
		t.Errorf("turn ended %v, want cancelled with cause cancel_timeout", end)
	}
	if !lost {
		t.Error("the deaf agent was not stopped")
	}
	// The session goes on: the next turn starts a new agent.
	end, _ = lastTurnEnded(t, g, id, cancelTurn)
	if end.GetStopReason() != "cancelled" {
		t.Errorf("the next turn ended %v", end)
	}
}

func TestTurnTimeoutEndsTheTurn(t *testing.T) {
	t.Parallel()
	const timeout = time.Minute
	g := turnGateway(t, timeout)
	// The turn's timer is armed before turn_started is stored.
	timeOut := func() { g.clock.Advance(timeout) }
	// An agent that honours session/cancel ends its turn and stays.
	slow := g.create(t, "slow")
	end, lost := lastTurnEnded(t, g, slow, timeOut)
	if end.GetStopReason() != "cancelled" || end.GetCause() != "turn_timeout" || lost {
		t.Errorf("slow: turn ended %v (agent lost %v), want cancelled by turn_timeout, agent kept", end, lost)
	}
	// One that ignores it is stopped after the grace.
	deaf := g.create(t, "deaf")
	end, lost = lastTurnEnded(t, g, deaf, func() {
		timeOut()
		graceOut(t, g)
	})
	if end.GetStopReason() != "cancelled" || end.GetCause() != "turn_timeout" || !lost {
		t.Errorf("deaf: turn ended %v (agent lost %v), want cancelled by turn_timeout, agent stopped", end, lost)
	}
}

// stuckAgent is an ACP v1 agent that, once prompted, asks for the file big
// of its working directory and never reads its input again: the gateway's
// answer fills the pipe, and every later write to the agent (session/cancel
// among them) blocks.
const stuckAgent = `id() { i=${1##*\"id\":}; echo "${i%%[,\}]*}"; }
read -r l; printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":1,"agentCapabilities":{}}}\n' "$(id "$l")"
read -r l; printf '{"jsonrpc":"2.0","id":%s,"result":{"sessionId":"stuck"}}\n' "$(id "$l")"
read -r l
printf '{"jsonrpc":"2.0","id":"big","method":"fs/read_text_file","params":{"sessionId":"stuck","path":"%s/big"}}\n' "$(pwd)"
exec sleep 600`

// stuckSession creates a session of the agent "stuck" (stuckAgent) in a
// working directory holding its big file.
func stuckSession(t *testing.T, g *gateway) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("x"), 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "stuck", Cwd: dir}))
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return res.Msg.GetSessionId()
}

// An agent that stops reading its input cannot hold off the grace: writing
// session/cancel to it blocks, yet the turn ends cancelled once the grace
// has passed, and Cancel returns.
func TestCancelIsEnforcedOnAnAgentThatStopsReading(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{0, 300 * time.Millisecond} {
		g := startGateway(t, gatewayOpts{
			agents: map[string][]string{"stuck": {"/bin/sh", "-c", stuckAgent}},
			configure: func(c *app.Config) {
				c.Session.TurnTimeout, c.Session.CancelGrace = timeout, 300*time.Millisecond
			},
		})
		id := stuckSession(t, g)
		wantCause, during := "turn_timeout", func() {}
		if timeout == 0 {
			wantCause = "cancel_timeout"
			during = func() {
				time.Sleep(300 * time.Millisecond) // the agent's read is under way
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				start := time.Now()
				if _, err := g.connect.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
					t.Errorf("Cancel: %v", err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("Cancel took %v", d)
				}
			}
		}
		start := time.Now()
		end, lost := lastTurnEnded(t, g, id, during)
		if end.GetStopReason() != "cancelled" || end.GetCause() != wantCause || !lost {
			t.Errorf("turn ended %v (agent lost %v), want cancelled by %s, agent stopped", end, lost, wantCause)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the turn took %v to end", d)
		}
	}
}
