package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// v2ShapesTurn edits a file as an ACP v2 agent does: a diff of changes and
// a git patch, and a permission request with a description and a command
// subject.
var v2ShapesTurn = agentsim.Turn{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"tool_call_update","toolCallId":"e1","title":"Edit a.go","kind":"edit","status":"completed",
		"content":[{"type":"diff","changes":[{"operation":"modify","path":"/w/a.go","fileType":"text"}],
		"patch":{"format":"git_patch","text":"diff --git a/w/a.go b/w/a.go\n--- a/w/a.go\n+++ b/w/a.go\n@@ -1 +1 @@\n-x\n+y\n"}}]}`),
	{Permission: &agentsim.Permission{
		Title:       "Run the tests?",
		Description: "They check the edit.",
		Subject:     raw(`{"type":"command","command":"go test ./...","cwd":"/w","toolCallId":"e1"}`),
	}},
}}

// A v2 agent's diff reaches clients as the typed fields of the contract's
// diff item, in the Prompt stream and in GetSession, and its permission
// request's description and command subject as the request's fields.
func TestV2DiffAndPermissionFieldsReachClients(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{v2ShapesTurn}}),
	}})
	id := g.create(t, "v2")
	var asked *acpv2.PermissionRequest
	events := turn(t, g.connect, id, func(ev *acpv2.SessionEvent) {
		if pr := ev.GetPermissionRequest(); pr != nil {
			asked = pr
			if _, err := g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: pr.GetRequestId(), OptionId: "allow-once"})); err != nil {
				t.Error(err)
			}
		}
	})
	wantDiff := &acpv2.Diff{
		Changes: []*acpv2.DiffChange{{Operation: "modify", Path: proto.String("/w/a.go"), FileType: proto.String("text")}},
		Patch:   &acpv2.DiffPatch{Format: "git_patch", Text: "diff --git a/w/a.go b/w/a.go\n--- a/w/a.go\n+++ b/w/a.go\n@@ -1 +1 @@\n-x\n+y\n"},
	}
	var streamed *acpv2.ToolCallContent
	for _, ev := range events {
		if u := ev.GetToolCallUpdate(); u != nil {
			streamed = u.GetContent().GetValue().GetItems()[0]
		}
	}
	if !proto.Equal(streamed.GetDiff(), wantDiff) || streamed.GetExtra() != nil {
		t.Fatalf("the streamed diff item is %v, want the diff %v", streamed, wantDiff)
	}
	stored := snapshot(t, g, id).GetToolCalls()[0].GetContent()[0]
	if !proto.Equal(stored.GetDiff(), wantDiff) || stored.GetExtra() != nil {
		t.Fatalf("GetSession's diff item is %v, want the diff %v", stored, wantDiff)
	}
	// A client of proto JSON reads the contract's names.
	js, err := protojson.Marshal(stored)
	var compact bytes.Buffer
	if err == nil {
		err = json.Compact(&compact, js)
	}
	if err != nil || !strings.Contains(compact.String(), `"changes":[{"operation":"modify","path":"/w/a.go","fileType":"text"}]`) {
		t.Fatalf("proto JSON %s, %v", js, err)
	}

	if asked == nil {
		t.Fatal("no permission request")
	}
	wantSubject := &acpv2.PermissionSubject{Subject: &acpv2.PermissionSubject_Command{Command: &acpv2.CommandSubject{
		Command: "go test ./...", Cwd: "/w", ToolCallId: proto.String("e1")}}}
	if asked.GetTitle() != "Run the tests?" || asked.GetDescription() != "They check the edit." ||
		!proto.Equal(asked.GetSubject(), wantSubject) || asked.GetMeta() != nil {
		t.Fatalf("permission request %v, want its title, description and command subject", asked)
	}
}

// Logout relays the negotiated version's method to the session's agent (v1
// logout, which the agent advertised; v2 auth/logout, which an agent with
// authentication methods offers), and is failed_precondition for an agent
// that offers neither.
func TestLogout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1":          agentCommand(t, agentsim.Script{ProtocolVersion: 1, Logout: true, SessionsFile: file("v1")}),
		"v2":          agentCommand(t, agentsim.Script{ProtocolVersion: 2, AuthMethods: []string{"key"}, Logout: true, SessionsFile: file("v2")}),
		"v1-no":       agentCommand(t, agentsim.Script{ProtocolVersion: 1}),
		"v2-no-auths": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Logout: true, SessionsFile: file("v2-no-auths")}),
	}})
	ctx := context.Background()
	logout := func(agent string) error {
		req := &acpv2.CreateSessionRequest{Agent: agent, Cwd: t.TempDir()}
		if agent == "v2" {
			req.AuthMethod = "key"
		}
		res, err := g.connect.CreateSession(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("%s: CreateSession: %v", agent, err)
		}
		_, err = g.connect.Logout(ctx, connect.NewRequest(&acpv2.LogoutRequest{SessionId: res.Msg.GetSessionId()}))
		return err
	}
	for _, agent := range []string{"v1", "v2"} {
		if err := logout(agent); err != nil {
			t.Fatalf("%s: Logout: %v", agent, err)
		}
		got, err := os.ReadFile(file(agent))
		if err != nil || string(got) != "logout\n" {
			t.Fatalf("%s: the agent recorded %q (%v), want one logout", agent, got, err)
		}
	}
	for _, agent := range []string{"v1-no", "v2-no-auths"} {
		if err := logout(agent); codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "logout") {
			t.Fatalf("%s: Logout: %v, want failed_precondition naming the method", agent, err)
		}
	}
	if _, err := os.Stat(file("v2-no-auths")); !os.IsNotExist(err) {
		t.Fatalf("an agent with no authentication methods was asked to log out (%v)", err)
	}
	_, err := g.connect.Logout(ctx, connect.NewRequest(&acpv2.LogoutRequest{SessionId: "nope"}))
	if codeOf(err) != connect.CodeNotFound {
		t.Fatalf("Logout of an unknown session: %v", err)
	}
}
