package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// elicitAgent asks for a form in its first turn and sends the user to a
// page in its second, and reports each answer.
var elicitAgent = agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{
	{Steps: []agentsim.Step{{Elicit: json.RawMessage(`{"mode":"form","message":"Your details","requestedSchema":{"type":"object","properties":{` +
		`"name":{"type":"string"},"age":{"type":"integer"},"tea":{"type":"boolean"},"size":{"type":"string","enum":["s","m"]}},"required":["name"]}}`)}}},
	{Steps: []agentsim.Step{{Elicit: json.RawMessage(`{"mode":"url","message":"Log in","url":"https://example.com/login","elicitationId":"e-1"}`)}}},
}}

// TestBrowserAnswersElicitations runs web/console/test/elicitation.mjs: the
// console renders a form elicitation as a form from its schema and a url
// elicitation as a link, and their answers reach the agent.
func TestBrowserAnswersElicitations(t *testing.T) {
	testutil.Needs(t, "node and chromium")
	node, chromium := browserTools(t)
	token := "console-test-token"
	g := startGatewayWith(t, token, map[string]agentsim.Script{"elicit": elicitAgent})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := browserScript(ctx, t, node, chromium, "elicitation.mjs", g, token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("elicitation.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		SessionID string   `json:"sessionId"`
		Said      []string `json:"said"`
		Href      string   `json:"href"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("elicitation.mjs printed %q: %v", stdout.String(), err)
	}
	want := []string{`elicit accept {"age":36,"name":"Ada","size":"m","tea":true}`, "elicit decline"}
	if strings.Join(got.Said, "\n") != strings.Join(want, "\n") {
		t.Errorf("the agent said %q, want %q", got.Said, want)
	}
	if got.Href != "https://example.com/login" {
		t.Errorf("the url elicitation links to %q", got.Href)
	}
	res, err := g.client.GetSession(ctx, authorized(connect.NewRequest(&acpv2.GetSessionRequest{SessionId: got.SessionID}), token))
	if err != nil || len(res.Msg.GetSession().GetPendingElicitations()) != 0 {
		t.Errorf("GetSession(%s): %v, %v; want no elicitation pending", got.SessionID, res, err)
	}
}
