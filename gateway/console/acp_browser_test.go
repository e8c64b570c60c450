package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// TestBrowserOpensACPWebSocket runs web/console/test/acp.mjs: a page of the
// console's origin in chromium opens /acp's WebSocket with its token as a
// subprotocol, under the console's CSP, and creates a session, which is
// the token's user's.
func TestBrowserOpensACPWebSocket(t *testing.T) {
	testutil.Needs(t, "node and chromium")
	node, chromium := browserTools(t)
	token := "console-test-token"
	g := startGateway(t, token)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := browserScript(ctx, t, node, chromium, "acp.mjs", g, token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("acp.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var got struct {
		Protocol        string `json:"protocol"`
		ProtocolVersion int    `json:"protocolVersion"`
		SessionID       string `json:"sessionId"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &got); err != nil {
		t.Fatalf("acp.mjs printed %q: %v", stdout.String(), err)
	}
	if got.ProtocolVersion != 1 || got.SessionID == "" {
		t.Fatalf("the page got %+v", got)
	}
	if got.Protocol != "acp" {
		t.Errorf("the gateway selected subprotocol %q, want acp (never the token's)", got.Protocol)
	}
	res, err := g.client.GetSession(ctx, authorized(connect.NewRequest(&acpv2.GetSessionRequest{SessionId: got.SessionID}), token))
	if err != nil || res.Msg.GetSession().GetAgent() != "demo" {
		t.Errorf("GetSession(%s) as the token's user: %v, %v", got.SessionID, res, err)
	}
}
