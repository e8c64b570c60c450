package acpnet_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/app"
)

// updatesOf returns the `update`s of the session/update notifications of
// msgs, leaving the user's messages out.
func updatesOf(msgs []map[string]any) []any {
	var out []any
	for _, m := range msgs {
		if m["method"] != "session/update" {
			continue
		}
		u := m["params"].(map[string]any)["update"].(map[string]any)
		if u["sessionUpdate"] != "user_message_chunk" {
			out = append(out, u)
		}
	}
	return out
}

// untilMethod reads c's messages up to the first of method.
func (c *client) untilMethod(method string) (found map[string]any, before []map[string]any) {
	c.t.Helper()
	for {
		m := c.next()
		if m["method"] == method {
			return m, before
		}
		before = append(before, m)
	}
}

// TestSecondClientSeesTheTurnAndLosesThePermission: a client that loads a
// session another client prompts sees the same updates live, is asked the
// same permission, and has it withdrawn ($/cancel_request) when the other
// answers first.
func TestSecondClientSeesTheTurnAndLosesThePermission(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	a, _ := dial(t, g.ws+"/acp/perm", bearer(aliceToken))
	sid := a.newSession("")
	b, _ := dial(t, g.ws+"/acp/perm", bearer(aliceToken))
	b.call(0, "initialize", `{"protocolVersion":1}`)
	if answer, _ := b.call(1, "session/load", `{"sessionId":"`+sid+`","cwd":"/","mcpServers":[]}`); answer["error"] != nil {
		t.Fatalf("session/load: %v", answer)
	}

	a.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"edit"}]}}`)
	askA, seenA := a.untilMethod("session/request_permission")
	askB, seenB := b.untilMethod("session/request_permission")
	if fmt.Sprint(askA["params"]) != fmt.Sprint(askB["params"]) {
		t.Errorf("the clients were asked\n%v\nand\n%v", askA["params"], askB["params"])
	}
	a.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"outcome":{"outcome":"selected","optionId":"allow-once"}}}`, askA["id"]))
	answer, rest := a.untilAnswer(2)
	if r, _ := answer["result"].(map[string]any); r["stopReason"] != "end_turn" {
		t.Errorf("the prompt was answered %v", answer)
	}
	seenA = append(seenA, rest...)

	withdrawn, more := b.untilMethod("$/cancel_request")
	seenB = append(seenB, more...)
	if got := withdrawn["params"].(map[string]any)["requestId"]; got != askB["id"] {
		t.Errorf("$/cancel_request withdrew %v, want B's request %v", got, askB["id"])
	}
	// B goes on seeing the turn, to the tool call's completion.
	for len(updatesOf(seenB)) < len(updatesOf(seenA)) {
		seenB = append(seenB, b.next())
	}
	if got, want := updatesOf(seenB), updatesOf(seenA); !reflect.DeepEqual(got, want) {
		t.Errorf("the second client saw\n%v\nthe first\n%v", got, want)
	}
	// B was shown A's prompt as the user's message.
	if got := texts(seenB); len(got) == 0 || got[0] != "user_message_chunk:edit" {
		t.Errorf("the second client's messages %q, want A's prompt first", got)
	}
}
