package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

func TestLostAgentIsReattachedOnPrompt(t *testing.T) {
	t.Parallel()
	say := func(text string) agentsim.Step {
		return update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)
	}
	turns := []agentsim.Turn{{Steps: []agentsim.Step{say("working")}}}
	replay := []agentsim.Step{say("replayed history")}
	agents := map[string][]string{
		"resume-v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Resume: true, Turns: turns}),
		"resume-v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Resume: true, Turns: turns}),
		// Offers both: resume is preferred, as it replays nothing.
		"both": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Resume: true, LoadSession: true, LoadReplay: replay, Turns: turns}),
		"load": agentCommand(t, agentsim.Script{ProtocolVersion: 1, LoadSession: true, LoadReplay: replay, Turns: turns}),
	}
	want := map[string]string{
		"resume-v1": "session/resume", "resume-v2": "session/resume", "both": "session/resume", "load": "session/load",
	}
	for name, how := range want {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The idle timeout ends the agent after its first turn, on
			// the gateway's fake clock, which only this test moves.
			g := startGateway(t, gatewayOpts{agents: agents, idleTimeout: time.Minute, fakeClock: true})
			id := g.create(t, name)
			first := turn(t, g.connect, id, nil)
			g.idleOut(t, id)
			// The agentsim process only knows the session id it was told in
			// session/resume or session/load: a prompt to any other id fails.
			second := turn(t, g.connect, id, nil)
			if end := second[len(second)-1].GetTurnEnded(); end.GetError() != "" || end.GetStopReason() != "end_turn" {
				t.Fatalf("turn after re-attach ended with %v", end)
			}
			// The log holds both turns, the loss and the re-attach, and
			// nothing the agent replayed while loading.
			all := watchAll(t, g.connect, id, 0, int(second[len(second)-1].GetSeq()))
			testutil.CheckSeqs(t, all, 1)
			var states []string
			for _, ev := range all {
				if sc := ev.GetStateChanged(); sc != nil {
					states = append(states, sc.GetState())
					if sc.GetState() == "ready" && !strings.Contains(sc.GetDetail(), how) {
						t.Fatalf("re-attach detail %q, want it to name %s", sc.GetDetail(), how)
					}
				}
				if strings.Contains(ev.GetAgentMessageChunk().GetContent().GetText().GetText(), "replayed") {
					t.Fatalf("the history replayed by session/load reached the log: %v", ev)
				}
			}
			if strings.Join(states, ",") != "agent_lost,ready" {
				t.Fatalf("state changes %v, want agent_lost then ready", states)
			}
			if n := len(all) - len(first) - len(second); n != 2 {
				t.Fatalf("%d events between the turns, want the 2 state changes", n)
			}
		})
	}
}

func TestSetModeAndConfigOption(t *testing.T) {
	t.Parallel()
	options := `[{"id":"model","name":"Model","type":"select","currentValue":"fast","options":[{"value":"fast","name":"Fast"}]}]`
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, ConfigOptions: raw(options)}),
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2}),
	}})
	ctx := context.Background()
	id := g.create(t, "v1")
	if _, err := g.connect.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: id, ModeId: "architect"})); err != nil {
		t.Fatalf("SetMode: %v", err)
	}
	res, err := g.connect.SetConfigOption(ctx, connect.NewRequest(&acpv2.SetConfigOptionRequest{
		SessionId: id, ConfigId: "model", Value: &acpv2.SetConfigOptionRequest_ValueId{ValueId: "fast"}}))
	if err != nil {
		t.Fatalf("SetConfigOption: %v", err)
	}
	if opts := res.Msg.GetConfigOptions(); len(opts) != 1 || opts[0].GetId() != "model" || opts[0].GetCurrentValue().GetStringValue() != "fast" {
		t.Fatalf("SetConfigOption returned %v", opts)
	}
	// Watchers see the mode switch the agent reported and the new options.
	events := watchAll(t, g.connect, id, 0, 2)
	if events[0].GetCurrentModeUpdate().GetCurrentModeId() != "architect" {
		t.Fatalf("first event %v, want the current_mode_update", events[0])
	}
	if opts := events[1].GetConfigOptionUpdate().GetConfigOptions(); len(opts) != 1 || opts[0].GetName() != "Model" {
		t.Fatalf("second event %v, want the config_option_update", events[1])
	}

	for name, req := range map[string]*acpv2.SetConfigOptionRequest{
		"no value":     {SessionId: id, ConfigId: "model"},
		"no config id": {SessionId: id, Value: &acpv2.SetConfigOptionRequest_Boolean{Boolean: true}},
	} {
		if _, err := g.connect.SetConfigOption(ctx, connect.NewRequest(req)); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: err = %v, want invalid_argument", name, err)
		}
	}
	if _, err := g.connect.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: id})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("SetMode without a mode: err = %v, want invalid_argument", err)
	}
	// ACP v2 has no session/set_mode.
	v2 := g.create(t, "v2")
	_, err = g.connect.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: v2, ModeId: "x"}))
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "session/set_mode") {
		t.Fatalf("SetMode on a v2 agent: err = %v, want failed_precondition", err)
	}
}

func TestTerminalRequestsAreRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Terminal: "ls"}}}}}),
	}})
	id := g.create(t, "v1")
	events := turn(t, g.connect, id, nil)
	said := events[1].GetAgentMessageChunk().GetContent().GetText().GetText()
	if !strings.HasPrefix(said, "terminal: ") || !strings.Contains(said, "terminals are not offered") {
		t.Fatalf("the agent's terminal/create got %q, want the refusal", said)
	}
	if end := events[len(events)-1].GetTurnEnded(); end.GetError() != "" {
		t.Fatalf("a refused terminal ended the turn with %v", end)
	}
}
