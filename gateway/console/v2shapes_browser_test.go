package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// v2EditTurn edits files as an ACP v2 agent does: a diff of changes and a
// git patch, then a permission request about a command, with a
// description.
var v2EditTurn = agentsim.Turn{Steps: []agentsim.Step{
	{Update: json.RawMessage(`{"sessionUpdate":"tool_call_update","toolCallId":"e1","title":"Edit a.go","kind":"edit","status":"completed",
		"content":[{"type":"diff","changes":[{"operation":"modify","path":"/w/a.go"},{"operation":"move","oldPath":"/w/old.txt","path":"/w/new.txt"}],
		"patch":{"format":"git_patch","text":"diff --git a/w/a.go b/w/a.go\n--- a/w/a.go\n+++ b/w/a.go\n@@ -1,2 +1,2 @@\n package a\n-var x = 1\n+var x = 2\n"}}]}`)},
	{Permission: &agentsim.Permission{
		Title:       "Run the tests?",
		Description: "They check the edit.",
		Subject:     json.RawMessage(`{"type":"command","command":"go test ./...","cwd":"/w"}`),
	}},
}}

// TestBrowserShowsV2Shapes runs web/console/test/v2shapes.mjs: the console
// shows a v2 diff's changes and its patch, and a permission request's
// description and command.
func TestBrowserShowsV2Shapes(t *testing.T) {
	testutil.Needs(t, "node and chromium")
	node, chromium := browserTools(t)
	token := "console-test-token"
	g := startGatewayWith(t, token, map[string]agentsim.Script{
		"v2": {ProtocolVersion: 2, Turns: []agentsim.Turn{v2EditTurn}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := browserScript(ctx, t, node, chromium, "v2shapes.mjs", g, token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("v2shapes.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}
