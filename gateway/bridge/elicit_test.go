package bridge_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// elicitScripts: "form" asks for a name in a form, "url" sends the user
// to a page.
var elicitScripts = map[string]agentsim.Script{
	"form": {ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Elicit: json.RawMessage(`{"mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`)}}}}},
	"url": {ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Elicit: json.RawMessage(`{"mode":"url","message":"Log in","url":"https://example.com/a","elicitationId":"e-1"}`)}}}}},
}

// startElicitEditor initializes a raw editor of ACP version v with
// capabilities caps (JSON), creates a session of agent and returns its id.
func startElicitEditor(t *testing.T, g *gateway, agent string, v int, caps string) (*rawEditor, string) {
	t.Helper()
	r := startRawEditor(t, bridgeOptions(g, agent))
	field := "clientCapabilities"
	if v == 2 {
		field = "capabilities"
	}
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":` + string(rune('0'+v)) + `,"` + field + `":` + caps + `}}`)
	r.until(isResponse(0))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[]}}`)
	created := r.until(isResponse(1))
	sid, _ := created[len(created)-1]["result"].(map[string]any)["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new answered %v", created)
	}
	return r, sid
}

func isMethod(method string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == method }
}

// An editor that advertised form elicitation is sent the agent's
// elicitation/create with its schema, and its answer reaches the agent.
func TestElicitationIsRelayedToTheEditor(t *testing.T) {
	t.Parallel()
	g := startGateway(t, elicitScripts)
	r, sid := startElicitEditor(t, g, "form", 1, `{"elicitation":{"form":{}}}`)
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
	msgs := r.until(isMethod("elicitation/create"))
	ask := msgs[len(msgs)-1]
	want := js(`{"sessionId":"` + sid + `","mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`)
	if !reflect.DeepEqual(ask["params"], want) {
		t.Fatalf("elicitation/create params %v, want %v", ask["params"], want)
	}
	id, _ := json.Marshal(ask["id"])
	r.send(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"action":"accept","content":{"name":"ada"}}}`)
	msgs = r.until(isResponse(2))
	var said []string
	for _, m := range msgs {
		if u := updateOf(m); u != nil && u["sessionUpdate"] == "agent_message_chunk" {
			said = append(said, u["content"].(map[string]any)["text"].(string))
		}
	}
	if !reflect.DeepEqual(said, []string{`elicit accept {"name":"ada"}`}) {
		t.Fatalf("the agent said %q, want the editor's content", said)
	}
}

// An elicitation another client answers first is withdrawn from the
// editor with $/cancel_request; an editor that did not advertise a mode is
// not sent elicitations of it, which other clients answer.
func TestElicitationAnsweredElsewhereIsWithdrawn(t *testing.T) {
	t.Parallel()
	g := startGateway(t, elicitScripts)
	for _, tc := range []struct {
		name, caps string
		relayed    bool
	}{{"advertised", `{"elicitation":{"url":{}}}`, true}, {"not advertised", `{"elicitation":{"form":{}}}`, false}} {
		t.Run(tc.name, func(t *testing.T) {
			r, sid := startElicitEditor(t, g, "url", 2, tc.caps)
			ctx := testCtx(t)
			watch, err := g.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: sid}))
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			r.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"b"}]}}`)
			var editorID any
			if tc.relayed {
				msgs := r.until(isMethod("elicitation/create"))
				ask := msgs[len(msgs)-1]
				if p, _ := ask["params"].(map[string]any); p["url"] != "https://example.com/a" || p["elicitationId"] != "e-1" {
					t.Fatalf("elicitation/create %v", ask)
				}
				editorID = ask["id"]
			}
			answerNext(t, g, watch, sid, "cancel")
			msgs := r.until(func(m map[string]any) bool { u := updateOf(m); return u != nil && u["state"] == "idle" })
			var withdrawn bool
			for _, m := range msgs {
				if m["method"] == "elicitation/create" {
					t.Fatalf("the editor was sent %v", m)
				}
				if m["method"] == "$/cancel_request" {
					withdrawn = reflect.DeepEqual(m["params"], map[string]any{"requestId": editorID})
				}
			}
			if withdrawn != tc.relayed {
				t.Fatalf("withdrawn from the editor: %v, want %v (%v)", withdrawn, tc.relayed, msgs)
			}
		})
	}
}

// answerNext waits on watch for the next elicitation request of session
// sid and answers it with action, as another client.
func answerNext(t *testing.T, g *gateway, watch *connect.ServerStreamForClient[acpv2.WatchResponse], sid, action string) {
	t.Helper()
	for watch.Receive() {
		if req := watch.Msg().GetEvent().GetElicitationRequest(); req != nil {
			if _, err := g.client.RespondElicitation(context.Background(), connect.NewRequest(&acpv2.RespondElicitationRequest{
				SessionId: sid, RequestId: req.GetRequestId(), Action: action})); err != nil {
				t.Fatalf("RespondElicitation: %v", err)
			}
			return
		}
	}
	t.Fatalf("the watch ended before an elicitation: %v", watch.Err())
}
