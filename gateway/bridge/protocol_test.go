package bridge_test

import (
	"reflect"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

func TestACPv2EditorGetsTheTurnAsStateUpdates(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2,"capabilities":{},"info":{"name":"test","version":"1"}}}`)
	init := r.next()
	res, _ := init["result"].(map[string]any)
	if init["id"] != float64(0) || res["protocolVersion"] != float64(2) ||
		!reflect.DeepEqual(res["capabilities"], js(`{"session":{"mcp":{"stdio":{},"http":{}}}}`)) || !reflect.DeepEqual(res["authMethods"], js(`[]`)) {
		t.Fatalf("initialize answered %v", init)
	}
	if info, _ := res["info"].(map[string]any); info["name"] != "acp-gateway" {
		t.Errorf("info %v", res["info"])
	}
	r.send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"` + t.TempDir() + `"}}`)
	created := r.next()
	sid, _ := created["result"].(map[string]any)["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new answered %v", created)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
	msgs := r.until(func(m map[string]any) bool {
		u := updateOf(m)
		return u != nil && u["sessionUpdate"] == "state_update" && u["state"] == "idle"
	})

	// The prompt is answered {} first: the turn goes on in updates.
	if !reflect.DeepEqual(msgs[0], js(`{"jsonrpc":"2.0","id":2,"result":{}}`)) {
		t.Fatalf("the first message is %v, want the prompt's answer {}", msgs[0])
	}
	var kinds []string
	var updates []map[string]any
	for _, m := range msgs[1:] {
		u := updateOf(m)
		if u == nil {
			t.Fatalf("unexpected message %v", m)
		}
		updates = append(updates, u)
		kinds = append(kinds, u["sessionUpdate"].(string))
	}
	want := []string{"user_message", "state_update", "agent_thought_chunk", "agent_message_chunk", "agent_message_chunk",
		"plan_update", "tool_call_update", "tool_call_update", "tool_call_update", "state_update"}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("updates %q, want %q", kinds, want)
	}
	if !reflect.DeepEqual(updates[0]["content"], js(`[{"type":"text","text":"hi"}]`)) || updates[0]["messageId"] == nil {
		t.Errorf("user_message %v", updates[0])
	}
	if updates[1]["state"] != "running" {
		t.Errorf("the turn starts with %v, want state running", updates[1])
	}
	// Chunks of one message share a made-up id; the thought has another.
	thought, hello, world := updates[2]["messageId"], updates[3]["messageId"], updates[4]["messageId"]
	if hello == nil || hello != world || thought == nil || thought == hello {
		t.Errorf("message ids: thought %v, chunks %v and %v", thought, hello, world)
	}
	if !reflect.DeepEqual(updates[5], js(`{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"plan",`+
		`"entries":[{"content":"Read a.go","priority":"high","status":"in_progress"}]}}`)) {
		t.Errorf("plan_update %v", updates[5])
	}
	if u := updates[6]; u["toolCallId"] != "c1" || u["title"] != "Read a.go" || u["kind"] != "read" || u["status"] != "pending" {
		t.Errorf("the tool call's first upsert %v", u)
	}
	if !reflect.DeepEqual(updates[7], js(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}`)) {
		t.Errorf("the tool call's second upsert %v", updates[7])
	}
	if !reflect.DeepEqual(updates[9], js(`{"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}`)) {
		t.Errorf("the turn ends with %v", updates[9])
	}

	// ACP v2 has neither session/load nor session/set_mode.
	r.send(`{"jsonrpc":"2.0","id":3,"method":"session/set_mode","params":{"sessionId":"` + sid + `","modeId":"x"}}`)
	if e := r.next(); e["id"] != float64(3) || e["error"].(map[string]any)["code"] != float64(-32601) {
		t.Errorf("session/set_mode (v2) answered %v, want method not found", e)
	}
}

func TestMalformedLinesAreRefusedNotFatal(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	errorCode := func(m map[string]any) any {
		e, _ := m["error"].(map[string]any)
		return e["code"]
	}
	for _, tc := range []struct {
		line, want string
		ok         func(map[string]any) bool
	}{
		{`this is not json`, "a parse error with a null id", func(m map[string]any) bool {
			return m["id"] == nil && errorCode(m) == float64(-32700)
		}},
		{`{"hello":"world"}`, "an invalid request with a null id", func(m map[string]any) bool {
			return m["id"] == nil && errorCode(m) == float64(-32600)
		}},
		// Request id 0 is an id like any other.
		{`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`, "the answer to request 0", func(m map[string]any) bool {
			res, _ := m["result"].(map[string]any)
			return m["id"] == float64(0) && res["protocolVersion"] == float64(1)
		}},
		{`{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{}}`, "method not found", func(m map[string]any) bool {
			return m["id"] == float64(7) && errorCode(m) == float64(-32601)
		}},
	} {
		r.send(tc.line)
		if got := r.next(); !tc.ok(got) {
			t.Errorf("%s: got %v, want %s", tc.line, got, tc.want)
		}
	}
}

func TestHostileRequestsGetErrorsNotACrash(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	var early []map[string]any // answers read ahead
	answered := func(id any) map[string]any {
		for i, m := range early {
			if m["id"] == id {
				early = append(early[:i], early[i+1:]...)
				return m
			}
		}
		for {
			m := r.next()
			if m["id"] == id {
				return m
			}
			early = append(early, m)
		}
	}
	for _, tc := range []struct {
		line string
		id   any // of the answer
		code float64
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":[]}`, 1.0, -32602},
		{`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":[42]}}`, 2.0, -32602},
		{`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"x"}]}}`, 3.0, -32002},
		{`{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"relative","mcpServers":[]}}`, 4.0, -32602},
		{`{"jsonrpc":"2.0","id":5,"method":"session/load","params":{}}`, 5.0, -32602},
		{`{"jsonrpc":"2.0","id":6,"method":"session/set_config_option","params":{"sessionId":"s","configId":"c","value":{}}}`, 6.0, -32602},
		{`{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s"}}`, 7.0, -32602},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}`, nil, -32600},
		{`[{"jsonrpc":"2.0","id":8,"method":"initialize"}]`, nil, -32600},
		// An answer to nothing the bridge asked is dropped; the next
		// request is answered as usual.
		{`{"jsonrpc":"2.0","id":99,"result":{"outcome":{"outcome":"cancelled"}}}`, nil, 0},
		{`{"jsonrpc":"2.0","id":"str","method":"authenticate","params":{"methodId":"x"}}`, "str", -32601},
	} {
		r.send(tc.line)
		if tc.code == 0 {
			continue
		}
		// Calls run concurrently, so their answers may come in any order;
		// a null id is answered in the order of the lines.
		var got map[string]any
		if tc.id == nil {
			got = r.next()
			for got["id"] != nil {
				early = append(early, got)
				got = r.next()
			}
		} else {
			got = answered(tc.id)
		}
		e, _ := got["error"].(map[string]any)
		if got["id"] != tc.id || e["code"] != tc.code || e["message"] == "" {
			t.Errorf("%s: got %v, want error %v for id %v", tc.line, got, tc.code, tc.id)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":1}}`)
	if got := answered(9.0); got["result"] == nil {
		t.Errorf("initialize after the hostile lines: %v", got)
	}
	if len(early) > 0 {
		t.Errorf("unexpected messages: %v", early)
	}
}
