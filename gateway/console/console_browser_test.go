package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// retiredSession is the id of a session whose agent ("retired") the
// gateway no longer configures.
const retiredSession = "retired-session-0001"

// TestBrowserConsole runs web/console/test/console.mjs in chromium at
// 1280x800 and at 390x844 against a gateway with a scripted agent that
// offers three modes and a model option in session/new (the pickers must
// list them all on open, from GetSession's snapshot), and whose first
// turn switches the mode and the model, reports usage and a title, writes
// markdown (with a script that must not run) and an image, and asks for
// permission after a 300-line diff; its second turn reuses a toolCallId of
// the first. The page must bring the permission into view and say it
// waits, render the markdown as elements, fold the diff into hunks, give
// the reused id a new card, send on Enter, and not overflow the phone's
// width; the session list shows titles, filters, deletes, and marks the
// session of an agent no longer configured as read only.
func TestBrowserConsole(t *testing.T) {
	testutil.Needs(t, "node and chromium")
	node, chromium := browserTools(t)
	token := "console-test-token"
	script, err := agentsim.Command(consoleScript())
	if err != nil {
		t.Fatal(err)
	}
	store := statestore.NewMemory(statestore.Options{})
	// A session of an agent that was configured once.
	if err := store.CreateSession(context.Background(), &statestore.Session{
		ID: retiredSession, Owner: "tester", Agent: "retired", Cwd: t.TempDir(),
		State: statestore.StateAgentLost, CreatedAt: time.Now().Add(-48 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, token, func(o *session.Options) {
		o.Agents["script"] = script
		o.Store = store
	})

	shots := screenshotDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := browserScript(ctx, t, node, chromium, "console.mjs", g, token,
		"CONSOLE_SCREENSHOTS="+shots,
		"CONSOLE_RETIRED="+retiredSession,
	)
	var got struct {
		Sizes []string `json:"sizes"`
	}
	runBrowserScript(t, cmd, shots, &got)
	if want := []string{"1280x800", "390x844"}; fmt.Sprint(got.Sizes) != fmt.Sprint(want) {
		t.Errorf("console.mjs checked sizes %v, want %v", got.Sizes, want)
	}
}

// consoleScript is the scripted agent of TestBrowserConsole.
func consoleScript() agentsim.Script {
	update := func(v string) agentsim.Step { return agentsim.Step{Update: json.RawMessage(v)} }
	say := func(text string) agentsim.Step {
		b, _ := json.Marshal(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}})
		return agentsim.Step{Update: b}
	}
	// A 300-line file with one line changed in the middle.
	var oldText, newText strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&oldText, "line %d of the big file\n", i)
		if i == 150 {
			fmt.Fprintf(&newText, "line %d of the big file, changed\n", i)
		} else {
			fmt.Fprintf(&newText, "line %d of the big file\n", i)
		}
	}
	diff, _ := json.Marshal(map[string]any{
		"sessionUpdate": "tool_call", "toolCallId": "edit-big", "title": "Edit big.txt", "kind": "edit", "status": "pending",
		"content": []any{map[string]any{"type": "diff", "path": "{{cwd}}/big.txt", "oldText": oldText.String(), "newText": newText.String()}},
	})
	const markdown = "# Findings\n\nThis is **bold**, and `inline code`.\n\n" +
		"| file | lines |\n| --- | --- |\n| big.txt | 300 |\n\n" +
		"See [the docs](https://example.com/docs), not [this](javascript:window.__pwned='link').\n\n" +
		"<script>window.__pwned = 'script'</script>\n\n" +
		"<img src=\"x\" onerror=\"window.__pwned = 'onerror'\">\n\n" +
		"```go\nfunc main() { fmt.Println(\"hi\") }\n```\n"
	// An 8x8 blue PNG.
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEUlEQVR4nGPQz7+HFTEMLQkA8yRfAbxQd+cAAAAASUVORK5CYII="
	return agentsim.Script{
		// session/new offers three modes (the turn switches to one; the
		// others must show all the same) and the model option.
		SessionModes: json.RawMessage(`{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},` +
			`{"id":"code","name":"Code"},{"id":"architect","name":"Architect"}]}`),
		SessionConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"smart",` +
			`"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"smart",` +
			`"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
		Turns: []agentsim.Turn{
			{Steps: []agentsim.Step{
				update(`{"sessionUpdate":"current_mode_update","currentModeId":"code"}`),
				update(`{"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"fast",` +
					`"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]}`),
				update(`{"sessionUpdate":"usage_update","used":1200,"size":200000,"cost":{"amount":0.05,"currency":"USD"}}`),
				update(`{"sessionUpdate":"session_info_update","title":"Tidy the big file"}`),
				update(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Reading the notes first, then the big file."}}`),
				say(markdown),
				update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","mimeType":"image/png","data":"` + png + `"}}`),
				update(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read notes.txt","kind":"read","status":"completed"}`),
				{Update: diff},
				{Permission: &agentsim.Permission{
					ToolCall: json.RawMessage(`{"toolCallId":"edit-big"}`),
					Allowed:  []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"edit-big","status":"completed"}`)},
					Rejected: []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"edit-big","status":"failed"}`)},
				}},
				say("Done with the first turn."),
			}},
			{Steps: []agentsim.Step{
				update(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read notes.txt again","kind":"read","status":"completed"}`),
				say("Second turn done."),
			}},
		},
	}
}
