package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// burstThenAsk floods updates, then asks permission: the turn goes on
// only once a client that saw the request answers it.
var burstThenAsk = agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	{Flood: &agentsim.Flood{Count: 300, Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"u{{n}}"}}`)}},
	{Permission: &agentsim.Permission{
		ToolCall: raw(`{"toolCallId":"e1","title":"Edit main.go","kind":"edit"}`),
		Allowed:  []agentsim.Step{update(`{"sessionUpdate":"tool_call","toolCallId":"e1","title":"Edit main.go","status":"completed"}`)},
	}},
}}}}

// answerFromWatch watches session id through c and answers its permission
// requests, until the turn ends; it returns the events it saw. It may run
// in its own goroutine.
func answerFromWatch(ctx context.Context, c acpv2connect.SessionServiceClient, stream *connect.ServerStreamForClient[acpv2.WatchResponse], id string) ([]*acpv2.SessionEvent, error) {
	var events []*acpv2.SessionEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue
		}
		events = append(events, ev)
		if pr := ev.GetPermissionRequest(); pr != nil {
			if _, err := c.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: pr.GetRequestId(), OptionId: "allow-once"})); err != nil {
				return events, err
			}
		}
		if ev.GetTurnEnded() != nil {
			return events, nil
		}
	}
	return events, errors.Join(errors.New("the watch ended before the turn"), stream.Err())
}

// Events sent in batches with one flush still reach the client at once:
// the permission request at the end of a burst is seen (and answered) by a
// watcher, with no heartbeat to push it out, over every protocol.
func TestBatchedEventsArriveWithoutWaiting(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{heartbeat: time.Hour, agents: map[string][]string{"ask": agentCommand(t, burstThenAsk)}})
	for name, c := range g.clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := g.create(t, "ask")
			stream, cancel := openWatch(t, c, id)
			defer cancel()
			if !stream.Receive() || stream.Msg().GetHeartbeat() == nil {
				t.Fatalf("no opening heartbeat: %v", stream.Err())
			}
			type result struct {
				events []*acpv2.SessionEvent
				err    error
			}
			watched := make(chan result, 1)
			go func() {
				events, err := answerFromWatch(context.Background(), c, stream, id)
				watched <- result{events, err}
			}()
			prompted := turn(t, c, id, nil)
			w := <-watched
			if w.err != nil {
				t.Fatal(w.err)
			}
			// The turn's start and end, the 300, the request and its
			// resolution, the gateway's merge of the answered request's
			// call (its update and merged call), the agent's update and
			// merged call.
			if len(w.events) != len(prompted) || len(prompted) != 300+8 {
				t.Fatalf("the watch got %d events, the prompt %d; want %d", len(w.events), len(prompted), 300+8)
			}
			for i := range prompted {
				if !eventEqual(w.events[i], prompted[i]) {
					t.Fatalf("event %d: watch %v, prompt %v", i, w.events[i], prompted[i])
				}
			}
			testutil.CheckSeqs(t, w.events, 1)
		})
	}
}

// Heartbeats go on on a stream that has sent batches, over every protocol.
func TestHeartbeatsAfterBatches(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{heartbeat: 50 * time.Millisecond, agents: map[string][]string{"flood": agentCommand(t, floodScript(300, 0))}})
	for name, c := range g.clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := g.create(t, "flood")
			stream, cancel := openWatch(t, c, id)
			defer cancel()
			checkFlood(t, turn(t, c, id, nil), 300)
			var events []*acpv2.SessionEvent
			beats := 0
			for beats < 3 && stream.Receive() {
				if ev := stream.Msg().GetEvent(); ev != nil {
					events = append(events, ev)
				} else if stream.Msg().GetHeartbeat() != nil && len(events) == 300+2 {
					beats++ // after the whole turn
				}
			}
			checkFlood(t, events, 300)
			if beats < 3 {
				t.Fatalf("%d heartbeats after the turn: %v", beats, stream.Err())
			}
		})
	}
}
