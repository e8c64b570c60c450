package agentsim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		optionKind string
		editStatus string
	}{
		{name: "allowed", optionKind: "allow", editStatus: "completed"},
		{name: "rejected", optionKind: "reject", editStatus: "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const cwd = `/home/demo/my "project"`
			permissions := make(chan json.RawMessage, 4)
			h := start(t, agentsim.Demo(), clientConfig{permit: func(params json.RawMessage) any {
				permissions <- params
				var p struct {
					Options []struct {
						OptionID string `json:"optionId"`
						Kind     string `json:"kind"`
					} `json:"options"`
				}
				_ = json.Unmarshal(params, &p)
				for _, o := range p.Options {
					if strings.HasPrefix(o.Kind, tt.optionKind) {
						return selected(o.OptionID)
					}
				}
				t.Errorf("no %s option in %s", tt.optionKind, params)
				return cancelledOutcome
			}})
			res := h.initialize()
			if res["protocolVersion"] != float64(1) {
				t.Errorf("protocolVersion = %v, want 1", res["protocolVersion"])
			}
			id := h.newSession(cwd)
			if got := h.run(id); got != "end_turn" {
				t.Errorf("stopReason = %q, want end_turn", got)
			}
			if len(permissions) != 1 {
				t.Fatalf("got %d permission requests, want 1", len(permissions))
			}
			var perm struct {
				SessionID string `json:"sessionId"`
				ToolCall  struct {
					ToolCallID string `json:"toolCallId"`
				} `json:"toolCall"`
			}
			if err := json.Unmarshal(<-permissions, &perm); err != nil {
				t.Fatal(err)
			}
			if perm.SessionID != id || perm.ToolCall.ToolCallID == "" {
				t.Errorf("permission request %+v", perm)
			}

			// It says first that it is a script, before any tool call,
			// and writes nothing.
			all := h.allUpdates()
			var first struct {
				SessionUpdate string `json:"sessionUpdate"`
				Content       struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if len(all) == 0 || json.Unmarshal(all[0].Update, &first) != nil ||
				first.SessionUpdate != "agent_message_chunk" || !strings.Contains(first.Content.Text, "a script, not an AI") {
				t.Errorf("the first update is not the disclaimer: %+v", first)
			}
			if w := h.fileWrites(); len(w) != 0 {
				t.Errorf("the demo wrote files: %v", w)
			}
			kinds := map[string]int{}
			toolKinds := map[string]bool{}
			statuses := map[string]string{}
			var growing []int // content lengths of the execute call's updates
			for i, u := range h.allUpdates() {
				if u.SessionID != id {
					t.Errorf("update %d sessionId = %q", i, u.SessionID)
				}
				if strings.Contains(string(u.Update), "{{cwd}}") {
					t.Errorf("update %d has an unexpanded placeholder: %s", i, u.Update)
				}
				var v struct {
					SessionUpdate string          `json:"sessionUpdate"`
					ToolCallID    string          `json:"toolCallId"`
					Kind          string          `json:"kind"`
					Status        string          `json:"status"`
					Content       json.RawMessage `json:"content"`
					Locations     []struct {
						Path string `json:"path"`
					} `json:"locations"`
					Entries []struct {
						Content, Priority, Status string
					} `json:"entries"`
				}
				if err := json.Unmarshal(u.Update, &v); err != nil {
					t.Fatalf("update %d: %v", i, err)
				}
				kinds[v.SessionUpdate]++
				switch v.SessionUpdate {
				case "tool_call":
					toolKinds[v.Kind] = true
					for _, l := range v.Locations {
						if !strings.HasPrefix(l.Path, cwd+"/") {
							t.Errorf("location %q is not under the cwd", l.Path)
						}
					}
				case "tool_call_update":
					var items []json.RawMessage
					_ = json.Unmarshal(v.Content, &items)
					if v.ToolCallID == "demo-exec" && len(items) > 0 {
						growing = append(growing, len(items))
					}
				case "plan":
					if len(v.Entries) != 3 {
						t.Errorf("plan has %d entries, want 3", len(v.Entries))
					}
				}
				if v.Status != "" {
					statuses[v.ToolCallID] = v.Status
				}
			}
			for _, k := range []string{"agent_thought_chunk", "agent_message_chunk", "plan", "tool_call", "tool_call_update"} {
				if kinds[k] == 0 {
					t.Errorf("no %s update (got %v)", k, kinds)
				}
			}
			if kinds["plan"] < 2 {
				t.Errorf("got %d plans, want the plan and its updates", kinds["plan"])
			}
			for _, k := range []string{"read", "edit", "execute"} {
				if !toolKinds[k] {
					t.Errorf("no %s tool call", k)
				}
			}
			if len(growing) < 3 {
				t.Errorf("execute output streamed in %v, want several growing updates", growing)
			}
			for i := range growing {
				if growing[i] != i+1 {
					t.Errorf("execute content lengths %v, want 1, 2, 3, ...", growing)
					break
				}
			}
			if statuses["demo-edit"] != tt.editStatus {
				t.Errorf("edit tool call ended %q, want %q", statuses["demo-edit"], tt.editStatus)
			}
			for _, id := range []string{"demo-read", "demo-exec"} {
				if statuses[id] != "completed" {
					t.Errorf("%s ended %q, want completed", id, statuses[id])
				}
			}
		})
	}
}

// TestDemoScript checks the demo script itself: valid, every update is a
// JSON object with a sessionUpdate, and the turn sleeps under four seconds
// whichever permission branch is taken.
func TestDemoScript(t *testing.T) {
	t.Parallel()
	s := agentsim.Demo()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ProtocolVersion != 1 || s.LoadSession || len(s.Turns) != 1 {
		t.Errorf("demo script header: version %d, loadSession %v, %d turns", s.ProtocolVersion, s.LoadSession, len(s.Turns))
	}
	var check func(path string, steps []agentsim.Step, branch string) time.Duration
	check = func(path string, steps []agentsim.Step, branch string) time.Duration {
		var total time.Duration
		for i, st := range steps {
			total += time.Duration(st.Sleep)
			if st.Update != nil {
				var v map[string]any
				if err := json.Unmarshal(st.Update, &v); err != nil {
					t.Errorf("%s[%d]: %v", path, i, err)
				} else if _, ok := v["sessionUpdate"].(string); !ok {
					t.Errorf("%s[%d]: no sessionUpdate in %s", path, i, st.Update)
				}
			}
			if p := st.Permission; p != nil {
				var tc, opts any
				if err := json.Unmarshal(p.ToolCall, &tc); err != nil {
					t.Errorf("%s[%d].toolCall: %v", path, i, err)
				}
				if err := json.Unmarshal(p.Options, &opts); err != nil {
					t.Errorf("%s[%d].options: %v", path, i, err)
				}
				allowed := check(path+".allowed", p.Allowed, branch)
				rejected := check(path+".rejected", p.Rejected, branch)
				if branch == "allowed" {
					total += allowed
				} else {
					total += rejected
				}
			}
		}
		return total
	}
	for _, branch := range []string{"allowed", "rejected"} {
		if d := check("turns[0].steps", s.Turns[0].Steps, branch); d > 4*time.Second || d < time.Second {
			t.Errorf("%s: demo turn sleeps %v, want between 1s and 4s", branch, d)
		}
	}
	// Demo returns a fresh script each time.
	s.Turns[0].Steps[0].Update[0] = 'X'
	if err := agentsim.Demo().Validate(); err != nil {
		t.Errorf("Demo shares its JSON between calls: %v", err)
	}
}
