package e2e

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// elicitationGateway runs agents that elicit: "form" asks for a name
// (required) and a count, "url" sends the user to a page and then says
// the elicitation is complete; each reports the answer it got.
func elicitationGateway(t *testing.T, o gatewayOpts) *gateway {
	o.agents = map[string][]string{
		"form": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			{Elicit: raw(`{"mode":"form","message":"Who are you?","requestedSchema":{"type":"object",` +
				`"properties":{"name":{"type":"string"},"count":{"type":"integer"}},"required":["name"]}}`)},
		}}}}),
		"url": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			{Elicit: raw(`{"mode":"url","message":"Log in","url":"https://example.com/login","elicitationId":"e-1"}`)},
			{Raw: `{"jsonrpc":"2.0","method":"elicitation/complete","params":{"elicitationId":"e-1"}}`},
		}}}}),
	}
	return startGateway(t, o)
}

// agentTexts returns the texts of the agent's message chunks in events.
func agentTexts(events []*acpv2.SessionEvent) []string {
	var out []string
	for _, ev := range events {
		if text := ev.GetAgentMessageChunk().GetContent().GetText().GetText(); text != "" {
			out = append(out, text)
		}
	}
	return out
}

func respondElicitation(g *gateway, c *acpv2.RespondElicitationRequest) error {
	_, err := g.connect.RespondElicitation(context.Background(), connect.NewRequest(c))
	return err
}

// A form elicitation reaches the prompting client and a watcher, shows in
// GetSession while pending, refuses content that does not fit its schema,
// and is answered by the first of two clients: the other is refused, and
// the agent gets the winner's content.
func TestFormElicitationFirstAnswerWins(t *testing.T) {
	t.Parallel()
	g := elicitationGateway(t, gatewayOpts{})
	id := g.create(t, "form")
	watcher := make(chan []*acpv2.SessionEvent, 1)
	go func() { watcher <- watchAll(t, g.clients["grpc over h2c"], id, 0, 4) }()
	var winners, losers int
	events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
		req := ev.GetElicitationRequest()
		if req == nil {
			return
		}
		if req.GetMode() != "form" || req.GetMessage() != "Who are you?" || req.GetRequestedSchema().GetFields()["properties"] == nil {
			t.Errorf("elicitation request %v", req)
		}
		if pending := snapshot(t, g, id).GetPendingElicitations(); len(pending) != 1 || pending[0].GetRequestId() != req.GetRequestId() {
			t.Errorf("GetSession's pending elicitations = %v, want the request", pending)
		}
		bad, _ := structpb.NewStruct(map[string]any{"count": 2})
		if err := respondElicitation(g, &acpv2.RespondElicitationRequest{SessionId: id, RequestId: req.GetRequestId(), Action: "accept", Content: bad}); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("content without the required name: %v, want invalid_argument", err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, name := range []string{"ada", "bob"} {
			wg.Go(func() {
				c, _ := structpb.NewStruct(map[string]any{"name": name, "count": 2})
				client := g.connect
				if name == "bob" {
					client = g.clients["grpc over h2c"]
				}
				_, err := client.RespondElicitation(context.Background(), connect.NewRequest(&acpv2.RespondElicitationRequest{
					SessionId: id, RequestId: req.GetRequestId(), Action: "accept", Content: c}))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners++
				case codeOf(err) == connect.CodeFailedPrecondition:
					losers++
				default:
					t.Errorf("RespondElicitation: %v", err)
				}
			})
		}
		wg.Wait()
	})
	if winners != 1 || losers != 1 {
		t.Fatalf("%d answers won and %d were refused, want one of each", winners, losers)
	}
	var resolved *acpv2.ElicitationResolved
	for _, ev := range events {
		if r := ev.GetElicitationResolved(); r != nil {
			resolved = r
		}
	}
	name := resolved.GetContent().GetFields()["name"].GetStringValue()
	if resolved.GetAction() != "accept" || resolved.GetAnsweredBy() != "user" || (name != "ada" && name != "bob") {
		t.Fatalf("elicitation resolved %v", resolved)
	}
	if got := agentTexts(events); len(got) != 1 || got[0] != `elicit accept {"count":2,"name":"`+name+`"}` {
		t.Fatalf("the agent reported %q, want the winner's content", got)
	}
	if pending := snapshot(t, g, id).GetPendingElicitations(); len(pending) != 0 {
		t.Fatalf("pending elicitations after the answer: %v", pending)
	}
	var kinds []string
	for _, ev := range <-watcher {
		switch {
		case ev.GetElicitationRequest() != nil:
			kinds = append(kinds, "request")
		case ev.GetElicitationResolved() != nil:
			kinds = append(kinds, "resolved")
		}
	}
	if strings.Join(kinds, " ") != "request resolved" {
		t.Fatalf("the watcher saw %q, want the request and its resolution", kinds)
	}
	m := g.scrape(t)
	m.want(t, 1, "acp_gateway_elicitations_total", "agent=form", "mode=form", "action=accept")
	m.want(t, 1, "acp_gateway_elicitation_answer_duration_seconds", "agent=form")
}

// A url elicitation carries its url; declined, the agent gets decline,
// and its elicitation/complete reaches the clients.
func TestURLElicitationDeclinedAndCompleted(t *testing.T) {
	t.Parallel()
	g := elicitationGateway(t, gatewayOpts{})
	id := g.create(t, "url")
	events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
		if req := ev.GetElicitationRequest(); req != nil {
			if req.GetUrl() != "https://example.com/login" || req.GetElicitationId() != "e-1" {
				t.Errorf("elicitation request %v", req)
			}
			if err := respondElicitation(g, &acpv2.RespondElicitationRequest{SessionId: id, RequestId: req.GetRequestId(), Action: "decline"}); err != nil {
				t.Errorf("RespondElicitation: %v", err)
			}
		}
	})
	var complete string
	for _, ev := range events {
		if c := ev.GetElicitationComplete(); c != nil {
			complete = c.GetElicitationId()
		}
	}
	if complete != "e-1" {
		t.Fatalf("no elicitationComplete for e-1 in %v", events)
	}
	if got := agentTexts(events); len(got) != 1 || got[0] != "elicit decline" {
		t.Fatalf("the agent reported %q, want decline", got)
	}
}

// An elicitation does not outlive its turn: Cancel answers it cancel
// (answered by cancel), and one nobody answers times out.
func TestElicitationEndsWithItsTurn(t *testing.T) {
	t.Parallel()
	g := elicitationGateway(t, gatewayOpts{permissionTimeout: 200 * time.Millisecond})
	for _, tc := range []struct{ name, by string }{{"cancel", "cancel"}, {"timeout", "timeout"}} {
		t.Run(tc.name, func(t *testing.T) {
			id := g.create(t, "form")
			events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
				if ev.GetElicitationRequest() != nil && tc.name == "cancel" {
					if _, err := g.connect.Cancel(context.Background(), connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
						t.Errorf("Cancel: %v", err)
					}
				}
			})
			var resolved *acpv2.ElicitationResolved
			for _, ev := range events {
				if r := ev.GetElicitationResolved(); r != nil {
					resolved = r
				}
			}
			if resolved.GetAction() != "cancel" || resolved.GetAnsweredBy() != tc.by {
				t.Fatalf("elicitation resolved %v, want cancel by %s", resolved, tc.by)
			}
			if pending := snapshot(t, g, id).GetPendingElicitations(); len(pending) != 0 {
				t.Fatalf("pending elicitations after the turn: %v", pending)
			}
		})
	}
}

// An elicitation whose agent dies before anyone answers is cancelled with
// the loss, not left pending for a client to answer in vain.
func TestElicitationEndsWithItsAgent(t *testing.T) {
	t.Parallel()
	exit1 := 1
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"dies": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			// Asked without waiting for the answer, then gone.
			{Raw: `{"jsonrpc":"2.0","id":"e","method":"elicitation/create","params":{"sessionId":"x","mode":"url","message":"Log in","url":"https://example.com/","elicitationId":"e-1"}}`},
			{Exit: &exit1},
		}}}}),
	}})
	id := g.create(t, "dies")
	events := turn(t, g.connect, id, nil)
	var asked, resolved bool
	for _, ev := range events {
		asked = asked || ev.GetElicitationRequest() != nil
		if r := ev.GetElicitationResolved(); r != nil {
			resolved = r.GetAction() == "cancel" && r.GetAnsweredBy() == "cancel"
		}
	}
	if !asked || !resolved {
		t.Fatalf("events %v: want the elicitation, then its cancel", events)
	}
	snap := snapshot(t, g, id)
	if snap.GetState() != "agent_lost" || len(snap.GetPendingElicitations()) != 0 {
		t.Fatalf("after the agent's loss: state %q, pending %v", snap.GetState(), snap.GetPendingElicitations())
	}
}

// Content that JSON cannot hold (an infinite number, which an integer
// property's check lets through) is refused over protobuf: stored in the
// log, it would make the session unreadable to every JSON client.
func TestElicitationContentJSONCannotHoldIsRefused(t *testing.T) {
	t.Parallel()
	g := elicitationGateway(t, gatewayOpts{})
	id := g.create(t, "form")
	pb := g.clients["connect+proto over HTTP/1.1"]
	turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
		req := ev.GetElicitationRequest()
		if req == nil {
			return
		}
		bad := &structpb.Struct{Fields: map[string]*structpb.Value{
			"name": structpb.NewStringValue("ada"), "count": structpb.NewNumberValue(math.Inf(1))}}
		_, err := pb.RespondElicitation(context.Background(), connect.NewRequest(&acpv2.RespondElicitationRequest{
			SessionId: id, RequestId: req.GetRequestId(), Action: "accept", Content: bad}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("content with an infinite count: %v, want invalid_argument", err)
		}
		if err := respondElicitation(g, &acpv2.RespondElicitationRequest{SessionId: id, RequestId: req.GetRequestId(), Action: "decline"}); err != nil {
			t.Errorf("declining: %v", err)
		}
	})
	// Every client, JSON ones included, can read the session's log.
	for proto, c := range g.clients {
		if _, err := c.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id})); err != nil {
			t.Errorf("%s: GetSession: %v", proto, err)
		}
	}
}
