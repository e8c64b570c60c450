package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// cwdTurn has the agent say the cwd its session/new was given.
var cwdTurn = agentsim.Turn{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"cwd={{cwd}}"}}`),
}}

// agentCwd runs a turn of a cwdTurn agent's session and returns the cwd
// the agent was given.
func agentCwd(t *testing.T, c acpv2connect.SessionServiceClient, id string) string {
	t.Helper()
	for _, ev := range turn(t, c, id, nil) {
		if text, ok := strings.CutPrefix(ev.GetAgentMessageChunk().GetContent().GetText().GetText(), "cwd="); ok {
			return text
		}
	}
	t.Fatal("the agent did not tell its cwd")
	return ""
}

func mkdir(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// sessionCwd returns session id's cwd as GetSession and ListSessions show
// it (they must agree).
func sessionCwd(t *testing.T, c acpv2connect.SessionServiceClient, id string) string {
	t.Helper()
	ctx := context.Background()
	got, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Msg.GetSessions() {
		if s.GetSessionId() == id && s.GetCwd() != got.Msg.GetSession().GetCwd() {
			t.Errorf("ListSessions shows cwd %q, GetSession %q", s.GetCwd(), got.Msg.GetSession().GetCwd())
		}
	}
	return got.Msg.GetSession().GetCwd()
}

func TestCwdIsConfinedToTheUsersWorkspace(t *testing.T) {
	t.Parallel()
	root, err := workspace.New(filepath.Join(t.TempDir(), "ws"))
	if err != nil {
		t.Fatal(err)
	}
	ws := root.Dir()
	alice, bob := filepath.Join(ws, "alice"), filepath.Join(ws, "bob")
	mkdir(t, filepath.Join(alice, "proj"), filepath.Join(bob, "proj"), filepath.Join(ws, "alice2", "proj"))
	if err := os.Symlink(bob, filepath.Join(alice, "to-bob")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(alice, "proj"), filepath.Join(alice, "to-proj")); err != nil {
		t.Fatal(err)
	}
	// carol's directory cannot be made: a file has its name.
	if err := os.WriteFile(filepath.Join(ws, "carol"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayOpts{
		auth:       tokenFile(t, "tok-alice-0123456789 alice", "tok-bob-0123456789 bob", "tok-carol-0123456789 carol"),
		workspaces: root,
		confineCwd: true,
		agents:     map[string][]string{"sim": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{cwdTurn, cwdTurn}})},
	})
	ctx := context.Background()
	for proto, c := range g.clientsAs(t, "tok-alice-0123456789") {
		t.Run(proto, func(t *testing.T) {
			create := func(cwd string) (string, error) {
				res, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: cwd}))
				if err != nil {
					return "", err
				}
				return res.Msg.GetSessionId(), nil
			}
			var denied string
			for _, cwd := range []string{
				"/",
				ws,
				alice + "/../bob",
				alice + "/../bob/proj",
				filepath.Join(alice, "to-bob"),
				filepath.Join(alice, "to-bob", "proj"),
				bob,
				filepath.Join(bob, "proj"),          // exists
				filepath.Join(bob, "no-such-dir"),   // does not
				filepath.Join(alice, "no-such-dir"), // does not, in her own
				filepath.Join(ws, "alice2", "proj"), // a prefix sibling
				filepath.Join(alice, "proj", "..", ".."),
				"/proc/self/cwd",
			} {
				_, err := create(cwd)
				if codeOf(err) != connect.CodePermissionDenied {
					t.Errorf("CreateSession(cwd %q): %v, want permission_denied", cwd, err)
					continue
				}
				// One answer for every cwd outside, existing or not.
				if denied == "" {
					denied = err.Error()
				} else if err.Error() != denied {
					t.Errorf("CreateSession(cwd %q): %q, unlike the others' %q", cwd, err, denied)
				}
			}
			if !strings.Contains(denied, alice) {
				t.Errorf("the refusal %q does not say where her workspace is", denied)
			}
			if _, err := create("relative/dir"); codeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("a relative cwd: %v, want invalid_argument", err)
			}

			// Her own directories are hers, symlinks resolved.
			for cwd, want := range map[string]string{
				filepath.Join(alice, "proj"):    filepath.Join(alice, "proj"),
				filepath.Join(alice, "to-proj"): filepath.Join(alice, "proj"),
				alice:                           alice,
			} {
				id, err := create(cwd)
				if err != nil {
					t.Fatalf("CreateSession(cwd %q): %v", cwd, err)
				}
				if got := sessionCwd(t, c, id); got != want {
					t.Errorf("session cwd %q, want %q", got, want)
				}
				if got := agentCwd(t, c, id); got != want {
					t.Errorf("the agent's cwd %q, want %q", got, want)
				}
			}

			// An empty cwd: a new directory of the session's own.
			id, err := create("")
			if err != nil {
				t.Fatalf("CreateSession with an empty cwd: %v", err)
			}
			want := filepath.Join(alice, id)
			if got := sessionCwd(t, c, id); got != want {
				t.Errorf("session cwd %q, want %q", got, want)
			}
			if fi, err := os.Stat(want); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("the session's workspace: %v, %v; want a 0700 directory", fi, err)
			}
			if got := agentCwd(t, c, id); got != want {
				t.Errorf("the agent's cwd %q, want %q", got, want)
			}
		})
	}

	// Bob's session in a directory of his own, and his fresh one, are his
	// alone: Alice cannot start a session in them.
	bobc := g.clientsAs(t, "tok-bob-0123456789")["grpc"]
	res, err := bobc.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim"}))
	if err != nil {
		t.Fatal(err)
	}
	fresh := sessionCwd(t, bobc, res.Msg.GetSessionId())
	if fresh != filepath.Join(bob, res.Msg.GetSessionId()) {
		t.Fatalf("Bob's new workspace %q", fresh)
	}
	alicec := g.clientsAs(t, "tok-alice-0123456789")["grpc"]
	if _, err := alicec.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: fresh})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Alice in Bob's session's workspace: %v, want permission_denied", err)
	}

	// When the directory cannot be made, nothing is created.
	carol := g.clientsAs(t, "tok-carol-0123456789")["connect+json"]
	if _, err := carol.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim"})); codeOf(err) != connect.CodeInternal {
		t.Errorf("CreateSession without a directory to work in: %v, want internal", err)
	}
	list, err := carol.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil || len(list.Msg.GetSessions()) != 0 {
		t.Errorf("after a failed creation carol has %v (%v), want no session", list.Msg.GetSessions(), err)
	}
}

func TestLocalUsersWorkspace(t *testing.T) {
	t.Parallel()
	sim := agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{cwdTurn}})
	elsewhere := t.TempDir()

	// With a workspace root and no authentication, the one local user's
	// directory is the root itself.
	confined, err := workspace.NewLocal(filepath.Join(t.TempDir(), "ws"))
	if err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(confined.Dir(), "proj"))
	g := startGateway(t, gatewayOpts{workspaces: confined, confineCwd: true, agents: map[string][]string{"sim": sim}})
	create := func(g *gateway, cwd string) (string, error) {
		res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: cwd}))
		if err != nil {
			return "", err
		}
		return res.Msg.GetSessionId(), nil
	}
	for _, cwd := range []string{confined.Dir(), filepath.Join(confined.Dir(), "proj")} {
		if _, err := create(g, cwd); err != nil {
			t.Errorf("CreateSession(cwd %q) in the local root: %v", cwd, err)
		}
	}
	for _, cwd := range []string{"/", elsewhere, filepath.Dir(confined.Dir())} {
		if _, err := create(g, cwd); codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("CreateSession(cwd %q) out of the local root: %v, want permission_denied", cwd, err)
		}
	}
	id, err := create(g, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sessionCwd(t, g.connect, id), filepath.Join(confined.Dir(), id); got != want {
		t.Errorf("a new session's cwd %q, want %q", got, want)
	}

	// Without confinement any directory will do, and an empty cwd still
	// gets a new one.
	free, err := workspace.NewLocal(filepath.Join(t.TempDir(), "ws"))
	if err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, gatewayOpts{workspaces: free, agents: map[string][]string{"sim": sim}})
	if _, err := create(g, elsewhere); err != nil {
		t.Errorf("CreateSession(cwd %q) unconfined: %v", elsewhere, err)
	}
	if id, err = create(g, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := sessionCwd(t, g.connect, id), filepath.Join(free.Dir(), id); got != want {
		t.Errorf("a new session's cwd %q, want %q", got, want)
	}
	if got := agentCwd(t, g.connect, id); got != filepath.Join(free.Dir(), id) {
		t.Errorf("the agent's cwd %q", got)
	}

	// Without workspaces an empty cwd is a bad argument.
	g = startGateway(t, gatewayOpts{agents: map[string][]string{"sim": sim}})
	if _, err := create(g, ""); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an empty cwd without workspaces: %v, want invalid_argument", err)
	}
}

// A gateway with users is not built with their agents free to run anywhere
// by mistake.
func TestAuthNeedsConfinedOrAnyCwd(t *testing.T) {
	t.Parallel()
	_, err := app.New(context.Background(), app.Config{Auth: tokenFile(t, "tok-a-0123456789 a")})
	if err == nil || !strings.Contains(err.Error(), "AnyCwd") {
		t.Fatalf("app.New with auth, unconfined: %v; want an error naming AnyCwd", err)
	}
	_, err = app.New(context.Background(), app.Config{Session: session.Options{ConfineCwd: true}})
	if err == nil || !strings.Contains(err.Error(), "Workspaces") {
		t.Fatalf("app.New confining to no workspace: %v; want an error naming Workspaces", err)
	}
}
