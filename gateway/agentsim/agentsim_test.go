package agentsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/sourcegraph/jsonrpc2"
)

func msg(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"sessionUpdate": "agent_message_chunk",
		"content":       map[string]string{"type": "text", "text": text},
	})
	return b
}

func oneTurn(steps ...agentsim.Step) agentsim.Script {
	return agentsim.Script{Turns: []agentsim.Turn{{Steps: steps}}}
}

func texts(us []update) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.text())
	}
	return out
}

func TestInitialize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		script      agentsim.Script
		wantVersion float64
		wantLoad    bool
		wantAuth    []any
	}{
		{name: "defaults", script: agentsim.Script{}, wantVersion: 1, wantAuth: []any{}},
		{name: "version and load", script: agentsim.Script{ProtocolVersion: 2, LoadSession: true}, wantVersion: 2, wantLoad: true, wantAuth: []any{}},
		{
			name:        "auth methods",
			script:      agentsim.Script{AuthMethods: []string{"api-key", "oauth"}},
			wantVersion: 1,
			wantAuth: []any{
				map[string]any{"id": "api-key", "name": "api-key"},
				map[string]any{"id": "oauth", "name": "oauth"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, tt.script, clientConfig{})
			res := h.initialize()
			if got := res["protocolVersion"]; got != tt.wantVersion {
				t.Errorf("protocolVersion = %v, want %v", got, tt.wantVersion)
			}
			caps, _ := res["agentCapabilities"].(map[string]any)
			if got := caps["loadSession"]; got != tt.wantLoad {
				t.Errorf("agentCapabilities.loadSession = %v, want %v", got, tt.wantLoad)
			}
			if got := res["authMethods"]; !reflect.DeepEqual(got, tt.wantAuth) {
				t.Errorf("authMethods = %v, want %v", got, tt.wantAuth)
			}
		})
	}
}

func TestSessionIDs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"first process", "second process"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := start(t, agentsim.Script{}, clientConfig{})
			h.initialize()
			for i, want := range []string{"sim-session-1", "sim-session-2", "sim-session-3"} {
				if got := h.newSession("/w"); got != want {
					t.Errorf("session/new #%d = %q, want %q", i+1, got, want)
				}
			}
		})
	}
}

func TestTurn(t *testing.T) {
	t.Parallel()
	updates := []json.RawMessage{
		raw(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"thinking"}}`),
		raw(`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":"read","status":"pending",
		      "locations":[{"path":"{{cwd}}/a.go","line":3}],"rawInput":{"n":[1,2.5,null,true]},"_custom":{"x":"<&>"}}`),
		raw(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":null}`),
		raw(`{"sessionUpdate":"_vendor_update","anything":["goes"]}`),
	}
	var steps []agentsim.Step
	for _, u := range updates {
		steps = append(steps, agentsim.Step{Update: u}, agentsim.Step{Sleep: agentsim.Duration(time.Millisecond)})
	}
	tests := []struct {
		name       string
		stopReason string
		want       string
	}{
		{name: "default stop reason", want: "end_turn"},
		{name: "scripted stop reason", stopReason: "max_tokens", want: "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := agentsim.Script{Turns: []agentsim.Turn{{Steps: steps, StopReason: tt.stopReason}}}
			h := start(t, s, clientConfig{})
			h.initialize()
			id := h.newSession("/home/u/proj")
			if got := h.run(id); got != tt.want {
				t.Errorf("stopReason = %q, want %q", got, tt.want)
			}
			got := h.allUpdates()
			if len(got) != len(updates) {
				t.Fatalf("got %d updates, want %d: %v", len(got), len(updates), got)
			}
			for i, u := range got {
				if u.SessionID != id {
					t.Errorf("update %d sessionId = %q, want %q", i, u.SessionID, id)
				}
				want := []byte(strings.ReplaceAll(string(updates[i]), "{{cwd}}", "/home/u/proj"))
				if !testutil.JSONEqual(t, u.Update, want) {
					t.Errorf("update %d = %s, want %s", i, u.Update, want)
				}
			}
		})
	}
}

func TestTurnRotation(t *testing.T) {
	t.Parallel()
	s := agentsim.Script{Turns: []agentsim.Turn{
		{Steps: []agentsim.Step{{Update: msg("zero")}}},
		{Steps: []agentsim.Step{{Update: msg("one")}}, StopReason: "refusal"},
	}}
	h := start(t, s, clientConfig{})
	h.initialize()
	a, b := h.newSession("/a"), h.newSession("/b")
	var stops []string
	for _, id := range []string{a, b, a} {
		stops = append(stops, h.run(id))
	}
	if want := []string{"end_turn", "refusal", "end_turn"}; !reflect.DeepEqual(stops, want) {
		t.Errorf("stop reasons = %v, want %v", stops, want)
	}
	got := h.allUpdates()
	if want := []string{"zero", "one", "zero"}; !reflect.DeepEqual(texts(got), want) {
		t.Errorf("texts = %v, want %v", texts(got), want)
	}
	if got[1].SessionID != b {
		t.Errorf("second turn's sessionId = %q, want %q", got[1].SessionID, b)
	}
}

func TestNoTurns(t *testing.T) {
	t.Parallel()
	h := start(t, agentsim.Script{}, clientConfig{})
	h.initialize()
	if got := h.run(h.newSession("/w")); got != "end_turn" {
		t.Errorf("stopReason = %q, want end_turn", got)
	}
}

func TestCwdEscaping(t *testing.T) {
	t.Parallel()
	cwd := `/tmp/we "ird"\dir <&>`
	s := oneTurn(
		agentsim.Step{Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{{cwd}}/x"}}`)},
		agentsim.Step{ReadFile: "{{cwd}}/f.txt"},
	)
	h := start(t, s, clientConfig{files: map[string]string{cwd + "/f.txt": "data"}})
	h.initialize()
	h.run(h.newSession(cwd))
	want := []string{cwd + "/x", "read " + cwd + "/f.txt: data"}
	if got := texts(h.allUpdates()); !reflect.DeepEqual(got, want) {
		t.Errorf("texts = %q, want %q", got, want)
	}
}

// An elicit step sends elicitation/create with the script's params and
// the prompt's session, and reports the client's answer.
func TestElicit(t *testing.T) {
	t.Parallel()
	s := oneTurn(agentsim.Step{Elicit: raw(`{"mode":"form","message":"in {{cwd}}","requestedSchema":{"type":"object"}}`)})
	h := start(t, s, clientConfig{})
	h.initialize()
	id := h.newSession("/p")
	h.run(id)
	want := []string{`elicit accept {"message":"in /p","session":"` + id + `"}`}
	if got := texts(h.allUpdates()); !reflect.DeepEqual(got, want) {
		t.Errorf("texts = %q, want %q", got, want)
	}
}

func TestPermission(t *testing.T) {
	t.Parallel()
	toolCall := raw(`{"toolCallId":"c1","title":"Edit {{cwd}}/main.go","kind":"edit"}`)
	customOptions := raw(`[{"optionId":"yes","name":"Always","kind":"allow_always"},{"optionId":"no","name":"Never","kind":"reject_always"}]`)
	tests := []struct {
		name        string
		options     json.RawMessage
		answer      any
		wantOptions string
		wantStop    string
		wantTexts   []string
		wantErr     bool
	}{
		{name: "allowed", answer: selected("allow-once"), wantOptions: agentsim.DefaultPermissionOptions, wantStop: "end_turn", wantTexts: []string{"allowed", "after"}},
		{name: "rejected", answer: selected("reject-once"), wantOptions: agentsim.DefaultPermissionOptions, wantStop: "end_turn", wantTexts: []string{"rejected", "after"}},
		{name: "custom allow", options: customOptions, answer: selected("yes"), wantOptions: string(customOptions), wantStop: "end_turn", wantTexts: []string{"allowed", "after"}},
		{name: "custom reject", options: customOptions, answer: selected("no"), wantOptions: string(customOptions), wantStop: "end_turn", wantTexts: []string{"rejected", "after"}},
		{name: "cancelled outcome", answer: cancelledOutcome, wantOptions: agentsim.DefaultPermissionOptions, wantStop: "cancelled"},
		{name: "unknown option", answer: selected("maybe"), wantOptions: agentsim.DefaultPermissionOptions, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := oneTurn(
				agentsim.Step{Permission: &agentsim.Permission{
					ToolCall: toolCall,
					Options:  tt.options,
					Allowed:  []agentsim.Step{{Update: msg("allowed")}},
					Rejected: []agentsim.Step{{Update: msg("rejected")}},
				}},
				agentsim.Step{Update: msg("after")},
			)
			h := start(t, s, clientConfig{})
			h.initialize()
			id := h.newSession("/p")
			pp := h.prompt(id)
			req := h.nextPermission()
			var params struct {
				SessionID string          `json:"sessionId"`
				ToolCall  json.RawMessage `json:"toolCall"`
				Options   json.RawMessage `json:"options"`
			}
			if err := json.Unmarshal(req.Params, &params); err != nil {
				t.Fatal(err)
			}
			if params.SessionID != id {
				t.Errorf("sessionId = %q, want %q", params.SessionID, id)
			}
			if want := raw(`{"toolCallId":"c1","title":"Edit /p/main.go","kind":"edit"}`); !testutil.JSONEqual(t, params.ToolCall, want) {
				t.Errorf("toolCall = %s, want %s", params.ToolCall, want)
			}
			if !testutil.JSONEqual(t, params.Options, []byte(tt.wantOptions)) {
				t.Errorf("options = %s, want %s", params.Options, tt.wantOptions)
			}
			req.answer(tt.answer)
			<-pp.done
			if tt.wantErr {
				var e *jsonrpc2.Error
				if !errors.As(pp.err, &e) || e.Code != jsonrpc2.CodeInternalError {
					t.Errorf("prompt error = %v, want an internal error", pp.err)
				}
				return
			}
			if got := pp.wait(t); got != tt.wantStop {
				t.Errorf("stopReason = %q, want %q", got, tt.wantStop)
			}
			if got := texts(h.allUpdates()); !reflect.DeepEqual(got, tt.wantTexts) {
				t.Errorf("texts = %q, want %q", got, tt.wantTexts)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	permission := agentsim.Step{Permission: &agentsim.Permission{
		ToolCall: raw(`{"toolCallId":"c1"}`),
		Allowed:  []agentsim.Step{{Update: msg("allowed")}},
		Rejected: []agentsim.Step{{Update: msg("rejected")}},
	}}
	tests := []struct {
		name string
		// answer is the permission answer sent after the cancel; nil when
		// the turn has no permission step.
		answer any
		steps  []agentsim.Step
	}{
		{
			name:  "during sleep",
			steps: []agentsim.Step{{Update: msg("before")}, {Sleep: agentsim.Duration(time.Minute)}, {Update: msg("late")}},
		},
		{
			name:   "pending permission answered cancelled",
			answer: cancelledOutcome,
			steps:  []agentsim.Step{{Update: msg("before")}, permission, {Update: msg("late")}},
		},
		{
			name:   "pending permission answered allow after cancel",
			answer: selected("allow-once"),
			steps:  []agentsim.Step{{Update: msg("before")}, permission, {Update: msg("late")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := agentsim.Script{Turns: []agentsim.Turn{{Steps: tt.steps}, {Steps: []agentsim.Step{{Update: msg("next turn")}}}}}
			h := start(t, s, clientConfig{})
			h.initialize()
			id := h.newSession("/w")
			pp := h.prompt(id)
			h.waitUpdates(1)
			var req *permissionRequest
			if tt.answer != nil {
				req = h.nextPermission()
			}
			h.notify("session/cancel", map[string]string{"sessionId": id})
			if req != nil {
				if pp.answered(100 * time.Millisecond) {
					t.Fatal("prompt answered while its permission request was pending")
				}
				req.answer(tt.answer)
			}
			if got := pp.wait(t); got != "cancelled" {
				t.Errorf("stopReason = %q, want cancelled", got)
			}
			if got, want := texts(h.allUpdates()), []string{"before"}; !reflect.DeepEqual(got, want) {
				t.Errorf("texts = %q, want %q", got, want)
			}
			// The agent still serves the session after a cancel.
			if got := h.run(id); got != "end_turn" {
				t.Errorf("next prompt stopReason = %q, want end_turn", got)
			}
		})
	}
}

func TestCancelOtherSessionIgnored(t *testing.T) {
	t.Parallel()
	h := start(t, oneTurn(agentsim.Step{Sleep: agentsim.Duration(50 * time.Millisecond)}, agentsim.Step{Update: msg("done")}), clientConfig{})
	h.initialize()
	a, b := h.newSession("/a"), h.newSession("/b")
	pp := h.prompt(a)
	h.notify("session/cancel", map[string]string{"sessionId": b})
	h.notify("session/cancel", map[string]string{"sessionId": "nope"})
	if got := pp.wait(t); got != "end_turn" {
		t.Errorf("stopReason = %q, want end_turn", got)
	}
}

func TestRaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  agentsim.Script
		prompt  bool
		garbage string
	}{
		{name: "startup", script: agentsim.Script{Startup: []agentsim.Step{{Raw: "garbage at startup {"}}}, garbage: "garbage at startup {"},
		{name: "turn", script: oneTurn(agentsim.Step{Update: msg("a")}, agentsim.Step{Raw: "not json"}, agentsim.Step{Update: msg("b")}), prompt: true, garbage: "not json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := startRaw(t, tt.script)
			r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`)
			var lines []string
			if !tt.prompt {
				lines = append(lines, r.next(), r.next())
			} else {
				lines = append(lines, r.next())
				r.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`)
				lines = append(lines, r.next())
				r.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sim-session-1","prompt":[]}}`)
				for !strings.Contains(lines[len(lines)-1], `"stopReason"`) {
					lines = append(lines, r.next())
				}
			}
			found := -1
			for i, l := range lines {
				if l == tt.garbage {
					found = i
					continue
				}
				if !json.Valid([]byte(l)) {
					t.Errorf("line %d is not JSON: %q", i, l)
				}
			}
			if found < 0 {
				t.Fatalf("garbage line %q not in output %q", tt.garbage, lines)
			}
			if tt.prompt {
				if !strings.Contains(lines[found-1], `"text":"a"`) || !strings.Contains(lines[found+1], `"text":"b"`) {
					t.Errorf("garbage not between the updates: %q", lines)
				}
			} else if found != 0 || !strings.Contains(lines[1], `"protocolVersion":1`) {
				t.Errorf("want the garbage, then the initialize answer: %q", lines)
			}
		})
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script agentsim.Script
		code   int
	}{
		{name: "startup", script: agentsim.Script{Startup: []agentsim.Step{{Stderr: "starting"}, {Exit: ptr(3)}}}, code: 3},
		{name: "turn", script: oneTurn(agentsim.Step{Update: msg("bye")}, agentsim.Step{Exit: ptr(7)}, agentsim.Step{Update: msg("never")}), code: 7},
		{name: "zero", script: oneTurn(agentsim.Step{Exit: ptr(0)}), code: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			codes := make(chan int, 2)
			h := start(t, tt.script, clientConfig{opts: []agentsim.Option{agentsim.WithExit(func(c int) { codes <- c })}})
			var callErr error
			if len(tt.script.Startup) > 0 {
				callErr = h.conn.Call(h.ctx, "initialize", map[string]any{"protocolVersion": 1}, nil)
			} else {
				h.initialize()
				pp := h.prompt(h.newSession("/w"))
				<-pp.done
				callErr = pp.err
			}
			if !errors.Is(callErr, jsonrpc2.ErrClosed) {
				t.Errorf("call error = %v, want the connection closed", callErr)
			}
			select {
			case c := <-codes:
				if c != tt.code {
					t.Errorf("exit code = %d, want %d", c, tt.code)
				}
			default:
				t.Fatal("exit function not called")
			}
			var exitErr *agentsim.ExitError
			if err := h.serveResult(5 * time.Second); !errors.As(err, &exitErr) || exitErr.Code != tt.code {
				t.Errorf("Serve = %v, want ExitError{%d}", err, tt.code)
			}
			for _, u := range h.allUpdates() {
				if u.text() == "never" {
					t.Error("a step after exit was played")
				}
			}
			if len(codes) != 0 {
				t.Error("exit function called twice")
			}
		})
	}
}

func TestHang(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script agentsim.Script
	}{
		{name: "startup", script: agentsim.Script{Startup: []agentsim.Step{{Hang: true}}}},
		{name: "turn", script: oneTurn(agentsim.Step{Update: msg("a")}, agentsim.Step{Hang: true}, agentsim.Step{Update: msg("never")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, tt.script, clientConfig{})
			var pending *jsonrpc2.Waiter
			if len(tt.script.Startup) > 0 {
				w, err := h.conn.DispatchCall(h.ctx, "initialize", map[string]any{"protocolVersion": 1})
				if err != nil {
					t.Fatal(err)
				}
				pending = &w
			} else {
				h.initialize()
				h.prompt(h.newSession("/w"))
				h.waitUpdates(1)
				time.Sleep(20 * time.Millisecond)
				w, err := h.conn.DispatchCall(h.ctx, "session/new", map[string]any{"cwd": "/w", "mcpServers": []any{}})
				if err != nil {
					t.Fatal(err)
				}
				pending = &w
			}
			ctx, cancel := context.WithTimeout(h.ctx, 200*time.Millisecond)
			defer cancel()
			if err := pending.Wait(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a hung agent answered: %v", err)
			}
			h.stopServe()
			if err := h.serveResult(5 * time.Second); !errors.Is(err, context.Canceled) {
				t.Errorf("Serve = %v, want context.Canceled", err)
			}
			if got := texts(h.allUpdates()); len(got) > 1 {
				t.Errorf("updates after the hang: %q", got)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	h := start(t, agentsim.Script{AuthMethods: []string{"api-key"}, LoadSession: true}, clientConfig{})
	h.initialize()
	newParams := map[string]any{"cwd": "/w", "mcpServers": []any{}}
	if e := h.callError("session/new", newParams); e.Code != agentsim.CodeAuthRequired {
		t.Errorf("session/new before authenticate: code %d, want %d", e.Code, agentsim.CodeAuthRequired)
	}
	if e := h.callError("session/load", map[string]any{"sessionId": "x", "cwd": "/w", "mcpServers": []any{}}); e.Code != agentsim.CodeAuthRequired {
		t.Errorf("session/load before authenticate: code %d, want %d", e.Code, agentsim.CodeAuthRequired)
	}
	if e := h.callError("authenticate", map[string]string{"methodId": "guess"}); e.Code != jsonrpc2.CodeInvalidParams {
		t.Errorf("authenticate with an unknown method: code %d, want %d", e.Code, jsonrpc2.CodeInvalidParams)
	}
	if e := h.callError("session/new", newParams); e.Code != agentsim.CodeAuthRequired {
		t.Errorf("session/new after a failed authenticate: code %d, want %d", e.Code, agentsim.CodeAuthRequired)
	}
	var res map[string]any
	h.call("authenticate", map[string]string{"methodId": "api-key"}, &res)
	if got := h.newSession("/w"); got != "sim-session-1" {
		t.Errorf("session/new after authenticate = %q", got)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		params any
		code   int64
	}{
		{name: "unknown method", method: "session/fly", params: map[string]any{}, code: jsonrpc2.CodeMethodNotFound},
		{name: "terminal not offered", method: "terminal/create", params: map[string]any{}, code: jsonrpc2.CodeMethodNotFound},
		{name: "load without capability", method: "session/load", params: map[string]any{"sessionId": "s", "cwd": "/", "mcpServers": []any{}}, code: jsonrpc2.CodeMethodNotFound},
		{name: "prompt unknown session", method: "session/prompt", params: map[string]any{"sessionId": "nope", "prompt": []any{}}, code: jsonrpc2.CodeInvalidParams},
		{name: "prompt without session", method: "session/prompt", params: map[string]any{"prompt": []any{}}, code: jsonrpc2.CodeInvalidParams},
		{name: "prompt bad params", method: "session/prompt", params: []int{1}, code: jsonrpc2.CodeInvalidParams},
		{name: "set_mode unknown session", method: "session/set_mode", params: map[string]any{"sessionId": "nope", "modeId": "m"}, code: jsonrpc2.CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, oneTurn(agentsim.Step{Update: msg("x")}), clientConfig{})
			h.initialize()
			h.newSession("/w")
			if e := h.callError(tt.method, tt.params); e.Code != tt.code {
				t.Errorf("code = %d (%s), want %d", e.Code, e.Message, tt.code)
			}
		})
	}
}

func TestSetModeAndConfigOption(t *testing.T) {
	t.Parallel()
	h := start(t, agentsim.Script{}, clientConfig{})
	h.initialize()
	id := h.newSession("/w")
	var res map[string]any
	h.call("session/set_mode", map[string]string{"sessionId": id, "modeId": "architect"}, &res)
	if len(res) != 0 {
		t.Errorf("session/set_mode = %v, want {}", res)
	}
	us := h.waitUpdates(1)
	if want := raw(`{"sessionUpdate":"current_mode_update","currentModeId":"architect"}`); !testutil.JSONEqual(t, us[0].Update, want) || us[0].SessionID != id {
		t.Errorf("update = %+v, want %s for %s", us[0], want, id)
	}
	var cfg map[string]any
	h.call("session/set_config_option", map[string]any{"sessionId": id, "configId": "model", "value": "fast"}, &cfg)
	if opts, ok := cfg["configOptions"].([]any); !ok || len(opts) != 0 {
		t.Errorf("session/set_config_option = %v, want empty configOptions", cfg)
	}
}

func TestLoadSession(t *testing.T) {
	t.Parallel()
	h := start(t, agentsim.Script{LoadSession: true, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"in {{cwd}}"}}`)},
	}}}}, clientConfig{})
	h.initialize()
	var res map[string]any
	h.call("session/load", map[string]any{"sessionId": "old-1", "cwd": "/restored", "mcpServers": []any{}}, &res)
	if len(res) != 0 {
		t.Errorf("session/load = %v, want {}", res)
	}
	if got := h.allUpdates(); len(got) != 0 {
		t.Errorf("session/load replayed %v", got)
	}
	if got := h.run("old-1"); got != "end_turn" {
		t.Errorf("stopReason = %q", got)
	}
	us := h.allUpdates()
	if len(us) != 1 || us[0].SessionID != "old-1" || us[0].text() != "in /restored" {
		t.Errorf("updates = %+v", us)
	}
	if got := h.newSession("/n"); got != "sim-session-1" {
		t.Errorf("session/new after load = %q", got)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	s := oneTurn(
		agentsim.Step{ReadFile: "{{cwd}}/a.txt"},
		agentsim.Step{ReadFile: "/elsewhere/missing.txt"},
		agentsim.Step{WriteFile: &agentsim.WriteFile{Path: "{{cwd}}/b.txt", Content: "new {{cwd}} text\n"}},
		agentsim.Step{WriteFile: &agentsim.WriteFile{Path: "/readonly/c.txt", Content: "x"}},
	)
	h := start(t, s, clientConfig{files: map[string]string{"/w/a.txt": "alpha\nbeta"}})
	h.initialize()
	id := h.newSession("/w")
	if got := h.run(id); got != "end_turn" {
		t.Errorf("stopReason = %q", got)
	}
	want := []string{
		"read /w/a.txt: alpha\nbeta",
		"read /elsewhere/missing.txt: no such file",
		"wrote /w/b.txt",
		"write /readonly/c.txt: read-only file system",
	}
	us := h.allUpdates()
	if got := texts(us); !reflect.DeepEqual(got, want) {
		t.Errorf("texts = %q, want %q", got, want)
	}
	for _, u := range us {
		if u.kind() != "agent_message_chunk" || u.SessionID != id {
			t.Errorf("update %+v, want an agent_message_chunk of %s", u, id)
		}
	}
	if got, want := h.fileWrites(), []fileWrite{{SessionID: id, Path: "/w/b.txt", Content: "new {{cwd}} text\n"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("writes = %+v, want %+v", got, want)
	}
}

func TestStderrAndInputClosed(t *testing.T) {
	t.Parallel()
	h := start(t, agentsim.Script{Startup: []agentsim.Step{{Stderr: "booting"}}, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Stderr: "turn line"}}}}}, clientConfig{})
	h.initialize()
	h.run(h.newSession("/w"))
	if got, want := h.stderr.String(), "booting\nturn line\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	_ = h.conn.Close() // closes the agent's input
	if err := h.serveResult(5 * time.Second); err != nil {
		t.Errorf("Serve after the input closed = %v, want nil", err)
	}
}

func TestServeRejectsInvalidScript(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script agentsim.Script
		want   string
	}{
		{name: "two actions", script: oneTurn(agentsim.Step{Update: msg("x"), Raw: "y"}), want: "turns[0].steps[0] does more than one thing"},
		{name: "update not object", script: oneTurn(agentsim.Step{Update: raw(`[1]`)}), want: "turns[0].steps[0].update"},
		{name: "bad json", script: agentsim.Script{Startup: []agentsim.Step{{Update: raw(`{"a":`)}}}, want: "startup[0].update"},
		{name: "missing tool call", script: oneTurn(agentsim.Step{Permission: &agentsim.Permission{}}), want: "permission: needs a toolCall"},
		{name: "nested", script: oneTurn(agentsim.Step{Permission: &agentsim.Permission{
			ToolCall: raw(`{"toolCallId":"c"}`),
			Rejected: []agentsim.Step{{Sleep: -1}},
		}}), want: "turns[0].steps[0].permission.rejected[0].sleep"},
		{name: "raw newline", script: oneTurn(agentsim.Step{Raw: "a\nb"}), want: "one line"},
		{name: "bad options", script: oneTurn(agentsim.Step{Permission: &agentsim.Permission{ToolCall: raw(`{}`), Options: raw(`{}`)}}), want: "options"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := agentsim.Serve(context.Background(), strings.NewReader(""), io.Discard, tt.script, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Serve = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestUpdatesKeepOrderUnderLoad checks that many quick updates arrive in
// script order while the client keeps sending requests.
func TestUpdatesKeepOrderUnderLoad(t *testing.T) {
	t.Parallel()
	const n = 200
	var steps []agentsim.Step
	var want []string
	for i := range n {
		text := strings.Repeat("x", i%7) + string(rune('a'+i%26))
		steps = append(steps, agentsim.Step{Update: msg(text)})
		want = append(want, text)
	}
	h := start(t, oneTurn(steps...), clientConfig{})
	h.initialize()
	id := h.newSession("/w")
	pp := h.prompt(id)
	for range 20 {
		h.newSession("/other")
	}
	if got := pp.wait(t); got != "end_turn" {
		t.Errorf("stopReason = %q", got)
	}
	if got := texts(h.allUpdates()); !reflect.DeepEqual(got, want) {
		t.Errorf("updates out of order")
	}
}
