package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// logLines parses JSON log output.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestLogsNameTheCallAndHoldNoSecrets(t *testing.T) {
	t.Parallel()
	const (
		secretToken  = "tok-Zebra-7f3a-0123456789"
		secretPrompt = "PROMPT-Quokka-launch-codes"
	)
	exit3 := 3
	logs := &testutil.SyncBuffer{}
	g := startGateway(t, gatewayOpts{
		log:    logs,
		auth:   tokenFile(t, secretToken+" alice"),
		anyCwd: true,
		agents: map[string][]string{
			"crash": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Exit: &exit3}}}}}),
		},
	})
	c := g.clientsAs(t, secretToken)["connect+json"]
	ctx := context.Background()
	res, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "crash", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()
	req := connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt(secretPrompt)})
	req.Header().Set(service.RequestIDHeader, "req-prompt-1")
	stream, err := c.Prompt(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	stream.Close()
	if got := stream.ResponseHeader().Get(service.RequestIDHeader); got != "req-prompt-1" {
		t.Errorf("response %s = %q, want the client's", service.RequestIDHeader, got)
	}
	// An id the client did not send is made up; a bad one is replaced.
	lreq := connect.NewRequest(&acpv2.ListSessionsRequest{})
	lreq.Header().Set(service.RequestIDHeader, "bad id with spaces")
	lres, err := c.ListSessions(ctx, lreq)
	if err != nil {
		t.Fatal(err)
	}
	if got := lres.Header().Get(service.RequestIDHeader); got == "" || strings.Contains(got, " ") {
		t.Errorf("request id of ListSessions %q", got)
	}
	if _, err := c.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		t.Fatal(err)
	}
	g.stop()

	out := logs.String()
	for _, secret := range []string{secretToken, secretPrompt} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs contain %q", secret)
		}
	}
	var promptLine, turnFailed, closeLine map[string]any
	for _, l := range logLines(t, out) {
		if l["msg"] == "rpc" && l["procedure"] == "/acp.v2.SessionService/CloseSession" {
			closeLine = l
		}
		// Calls that succeed are not errors.
		if l["msg"] == "rpc" && l["code"] == "ok" && l["level"] != "INFO" {
			t.Errorf("a successful call logged at %v: %v", l["level"], l)
		}
		if l["msg"] == "rpc" && l["procedure"] == "/acp.v2.SessionService/Prompt" {
			promptLine = l
		}
		if l["msg"] == "turn failed" {
			turnFailed = l
		}
		// Every line about a session names it, its agent and its user.
		if l["session"] != nil && (l["agent"] != "crash" || l["user"] != "alice") {
			t.Errorf("a line about session %v lacks its agent or user: %v", l["session"], l)
		}
	}
	for what, l := range map[string]map[string]any{"the Prompt call": promptLine, "the failed turn": turnFailed, "CloseSession": closeLine} {
		if l == nil {
			t.Errorf("no log line for %s in:\n%s", what, out)
			continue
		}
		if l["session"] != id || l["agent"] != "crash" || l["user"] != "alice" || l["request_id"] == nil ||
			(what != "CloseSession" && l["request_id"] != "req-prompt-1") {
			t.Errorf("the line for %s = %v, want session, agent, user and request_id", what, l)
		}
	}
	if promptLine != nil && promptLine["code"] != "ok" {
		t.Errorf("Prompt logged with code %v", promptLine["code"])
	}
}

// brokenGet is a store whose GetSession fails.
type brokenGet struct{ statestore.Store }

func (brokenGet) GetSession(context.Context, string) (*statestore.Session, error) {
	return nil, errors.New("disk on fire")
}

func TestInternalErrorsAreLoggedNotShown(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	g := startGateway(t, gatewayOpts{log: logs, store: brokenGet{statestore.NewMemory(statestore.Options{})}})
	_, err := g.connect.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: "s_1"}))
	if codeOf(err) != connect.CodeInternal || strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("GetSession: %v, want internal without the cause", err)
	}
	g.stop()
	for _, l := range logLines(t, logs.String()) {
		if l["msg"] == "rpc" && l["procedure"] == "/acp.v2.SessionService/GetSession" {
			if l["level"] != "ERROR" || l["error"] != "disk on fire" {
				t.Fatalf("the rpc line %v does not give the cause at ERROR", l)
			}
			return
		}
	}
	t.Fatalf("no rpc line for GetSession in:\n%s", logs.String())
}
