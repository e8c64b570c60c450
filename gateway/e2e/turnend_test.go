package e2e

import (
	"context"
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
// and "slow" (a long turn that honours cancel), with the turn timeout and
// cancel grace given.
func turnGateway(t *testing.T, turnTimeout time.Duration) *gateway {
	t.Helper()
	return startGateway(t, gatewayOpts{
		agents: map[string][]string{
			"deaf": agentCommand(t, agentsim.Script{Resume: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Hang: true}}}}}),
			"slow": agentCommand(t, agentsim.Script{Resume: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Sleep: agentsim.Duration(time.Minute)}}}}}),
		},
		configure: func(c *app.Config) {
			c.Session.TurnTimeout, c.Session.CancelGrace = turnTimeout, 300*time.Millisecond
		},
	})
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
	g := turnGateway(t, 300*time.Millisecond)
	// An agent that honours session/cancel ends its turn and stays.
	slow := g.create(t, "slow")
	end, lost := lastTurnEnded(t, g, slow, nil)
	if end.GetStopReason() != "cancelled" || end.GetCause() != "turn_timeout" || lost {
		t.Errorf("slow: turn ended %v (agent lost %v), want cancelled by turn_timeout, agent kept", end, lost)
	}
	// One that ignores it is stopped after the grace.
	deaf := g.create(t, "deaf")
	end, lost = lastTurnEnded(t, g, deaf, nil)
	if end.GetStopReason() != "cancelled" || end.GetCause() != "turn_timeout" || !lost {
		t.Errorf("deaf: turn ended %v (agent lost %v), want cancelled by turn_timeout, agent stopped", end, lost)
	}
}
