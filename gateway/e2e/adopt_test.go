package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// listAgentSessions returns the ids and cwds ListAgentSessions lists of
// agent, as "ID CWD", and the sessions themselves.
func listAgentSessions(t *testing.T, c acpv2connect.SessionServiceClient, agent string) ([]string, *acpv2.ListAgentSessionsResponse) {
	t.Helper()
	res, err := c.ListAgentSessions(context.Background(), connect.NewRequest(&acpv2.ListAgentSessionsRequest{Agent: agent}))
	if err != nil {
		t.Fatalf("ListAgentSessions: %v", err)
	}
	var got []string
	for _, s := range res.Msg.GetSessions() {
		got = append(got, s.GetAgentSessionId()+" "+s.GetCwd())
	}
	return got, res.Msg
}

func adopt(c acpv2connect.SessionServiceClient, agent, id, cwd string) (string, error) {
	res, err := c.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{
		Agent: agent, AdoptAgentSessionId: id, Cwd: cwd}))
	if err != nil {
		return "", err
	}
	return res.Msg.GetSessionId(), nil
}

// TestAdoptAnAgentsOwnSession: with --adopt-agent-sessions, a user sees
// the sessions an agent keeps (session/list, page after page) whose cwd
// lies in their workspace, and no other (another user's, one a symlink or
// `..` leads out of, one outside the root, a relative one, one that does
// not exist); adopting one makes a gateway session in that directory
// whose first events are the history the agent replays (v1 session/load,
// v2 session/resume from the start), and which takes prompts. Adopting
// one that is not listed is not_found, and one held by a gateway session
// that is not closed is failed_precondition until that one closes.
func TestAdoptAnAgentsOwnSession(t *testing.T) {
	t.Parallel()
	root, err := workspace.New(filepath.Join(t.TempDir(), "ws"))
	if err != nil {
		t.Fatal(err)
	}
	ws := root.Dir()
	alice, bob, outside := filepath.Join(ws, "alice"), filepath.Join(ws, "bob"), t.TempDir()
	mkdir(t, filepath.Join(alice, "proj"), filepath.Join(alice, "other"), filepath.Join(bob, "proj"))
	for link, to := range map[string]string{"to-proj": filepath.Join(alice, "proj"), "to-bob": filepath.Join(bob, "proj")} {
		if err := os.Symlink(to, filepath.Join(alice, link)); err != nil {
			t.Fatal(err)
		}
	}
	listed := []agentsim.ListedSession{
		{SessionID: "mine", Cwd: filepath.Join(alice, "proj"), Title: "My work", UpdatedAt: "2026-11-20T10:00:00Z"},
		{SessionID: "bobs", Cwd: filepath.Join(bob, "proj")},
		{SessionID: "escape-link", Cwd: filepath.Join(alice, "to-bob")},
		{SessionID: "dotdot", Cwd: alice + "/../bob/proj"},
		{SessionID: "outside", Cwd: outside},
		{SessionID: "relative", Cwd: "proj"},
		{SessionID: "gone", Cwd: filepath.Join(alice, "no-such-dir")},
		{SessionID: "via-link", Cwd: filepath.Join(alice, "to-proj")}, // on the last page
	}
	replay := []agentsim.Step{
		update(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"earlier question"}}`),
		update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"earlier answer"}}`),
	}
	for _, v := range []int{1, 2} {
		script := agentsim.Script{ProtocolVersion: v, List: true, ListedSessions: listed, ListPageSize: 3,
			LoadSession: v == 1, Resume: v == 2, LoadReplay: replay, Turns: []agentsim.Turn{cwdTurn}}
		g := startGateway(t, gatewayOpts{
			auth:       tokenFile(t, "tok-alice-0123456789 alice", "tok-bob-0123456789 bob"),
			workspaces: root,
			confineCwd: true,
			agents:     map[string][]string{"sim": agentCommand(t, script)},
			configure:  func(cfg *app.Config) { cfg.Session.AdoptAgentSessions = true },
		})
		c := g.clientsAs(t, "tok-alice-0123456789")["connect+json"]

		got, res := listAgentSessions(t, c, "sim")
		want := []string{"mine " + filepath.Join(alice, "proj"), "via-link " + filepath.Join(alice, "proj")}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || res.GetTruncated() {
			t.Fatalf("v%d: alice's agent sessions:\n%s\nwant\n%s", v, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		mine := res.GetSessions()[0]
		if mine.GetTitle() != "My work" || !mine.GetUpdatedAt().AsTime().Equal(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)) ||
			res.GetSessions()[1].GetUpdatedAt() != nil {
			t.Errorf("v%d: the listed sessions' title and time: %v", v, res.GetSessions())
		}
		// Where a cwd leads is what counts, as for CreateSession's cwd:
		// the paths through alice's directory that lead into bob's are
		// bob's.
		bobs := "bobs,escape-link,dotdot " + filepath.Join(bob, "proj")
		got, _ = listAgentSessions(t, g.clientsAs(t, "tok-bob-0123456789")["connect+proto"], "sim")
		if ids := strings.ReplaceAll(strings.Join(got, ","), " "+filepath.Join(bob, "proj")+",", ","); ids != bobs {
			t.Errorf("v%d: bob's agent sessions: %q", v, got)
		}

		for _, id := range []string{"bobs", "escape-link", "dotdot", "outside", "relative", "gone", "no-such-session"} {
			if _, err := adopt(c, "sim", id, ""); codeOf(err) != connect.CodeNotFound {
				t.Errorf("v%d: alice adopting %q: %v, want not_found", v, id, err)
			}
		}
		if _, err := adopt(c, "sim", "mine", filepath.Join(bob, "proj")); codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("v%d: adopting with bob's cwd: %v, want permission_denied", v, err)
		}
		if _, err := adopt(c, "sim", "mine", filepath.Join(alice, "other")); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("v%d: adopting with another cwd than the session's: %v, want invalid_argument", v, err)
		}

		id, err := adopt(c, "sim", "mine", filepath.Join(alice, "to-proj"))
		if err != nil {
			t.Fatalf("v%d: adopting: %v", v, err)
		}
		if cwd := sessionCwd(t, c, id); cwd != filepath.Join(alice, "proj") {
			t.Errorf("v%d: the adopted session's cwd %q", v, cwd)
		}
		events := watchAll(t, c, id, 0, 3)
		method := map[int]string{1: "session/load", 2: "session/resume"}[v]
		if events[0].GetUserMessageChunk().GetContent().GetText().GetText() != "earlier question" ||
			events[1].GetAgentMessageChunk().GetContent().GetText().GetText() != "earlier answer" ||
			events[2].GetStateChanged().GetState() != "ready" || !strings.Contains(events[2].GetStateChanged().GetDetail(), "adopted") ||
			!strings.Contains(events[2].GetStateChanged().GetDetail(), method) {
			t.Errorf("v%d: the adopted session's first events: %v", v, events)
		}
		if cwd := agentCwd(t, c, id); cwd != filepath.Join(alice, "proj") {
			t.Errorf("v%d: the agent was given cwd %q", v, cwd)
		}

		// Held by a session not closed, the agent session is not adopted
		// again until that session closes.
		if _, err := adopt(c, "sim", "mine", ""); codeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("v%d: adopting a second time: %v, want failed_precondition", v, err)
		}
		if _, err := c.CloseSession(context.Background(), connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
			t.Fatal(err)
		}
		if _, err := adopt(c, "sim", "mine", ""); err != nil {
			t.Errorf("v%d: adopting again after the first adopter closed: %v", v, err)
		}
		g.stop()
	}
}

// TestAdoptionIsOffByDefault: without --adopt-agent-sessions,
// ListAgentSessions and an adopting CreateSession are failed_precondition
// saying how it is turned on, and no agent is started for them.
func TestAdoptionIsOffByDefault(t *testing.T) {
	t.Parallel()
	starts := filepath.Join(t.TempDir(), "starts")
	cwd := t.TempDir()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{"sim": agentCommand(t, agentsim.Script{
		ProtocolVersion: 1, List: true, LoadSession: true,
		ListedSessions: []agentsim.ListedSession{{SessionID: "mine", Cwd: cwd}},
		Startup:        []agentsim.Step{{Shell: "echo started >> " + starts}}})}})
	ctx := context.Background()
	_, err := g.connect.ListAgentSessions(ctx, connect.NewRequest(&acpv2.ListAgentSessionsRequest{Agent: "sim"}))
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--adopt-agent-sessions") {
		t.Errorf("ListAgentSessions: %v, want failed_precondition naming the flag", err)
	}
	if _, err := adopt(g.connect, "sim", "mine", cwd); codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--adopt-agent-sessions") {
		t.Errorf("CreateSession adopting: %v, want failed_precondition naming the flag", err)
	}
	if _, err := os.Stat(starts); !os.IsNotExist(err) {
		t.Errorf("an agent was started: %v", err)
	}
	list, err := g.connect.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 0 {
		t.Errorf("sessions after the refusals: %v, %v", list.Msg.GetSessions(), err)
	}
}
