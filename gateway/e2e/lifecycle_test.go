package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// TestAuthenticationMethodFromTheSessionRequest: CreateSession's
// authMethod runs the agent's method as its ACP version has it (v1 `id`
// and authenticate, v2 `methodId` and auth/login).
func TestAuthenticationMethodFromTheSessionRequest(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, AuthMethods: []string{"api-key"}, Turns: []agentsim.Turn{v1Turn}}),
		"v2": agentCommand(t, agentsim.Script{ProtocolVersion: 2, AuthMethods: []string{"api-key"}}),
	}})
	ctx := context.Background()
	for _, agent := range []string{"v1", "v2"} {
		create := func(method string) error {
			_, err := g.connect.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent, Cwd: t.TempDir(), AuthMethod: method}))
			return err
		}
		if err := create(""); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "api-key") {
			t.Fatalf("%s, no method named: %v, want invalid_argument listing the methods", agent, err)
		}
		if err := create("oauth"); codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("%s, a method the agent does not offer: %v", agent, err)
		}
		if err := create("api-key"); err != nil {
			t.Fatalf("%s, with the agent's method: %v", agent, err)
		}
	}
}

// TestIdleAgentIsEnded is not parallel: it identifies the agent among this
// process's children.
func TestIdleAgentIsEnded(t *testing.T) {
	// On a fake clock, the idle timeout passes only once the turn is over.
	g := startGateway(t, gatewayOpts{idleTimeout: time.Minute, fakeClock: true, agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}}),
	}})
	before := childProcesses()
	id := g.create(t, "v1")
	pid := newChild(t, before)
	turn(t, g.connect, id, nil)
	g.idleOut(t, id)
	testutil.WaitFor(t, "the idle agent's processes to be gone", func() bool { return !procfs.GroupAlive(pid) })
	// The session's state survives its agent.
	if n := len(snapshot(t, g, id).GetToolCalls()); n != 2 {
		t.Fatalf("%d tool calls after the agent ended, want 2", n)
	}
	// This agent cannot take its side of the session back: the next
	// prompt starts a new agent session.
	startsAfresh(t, g, id)
}

func TestShutdownEndsOpenStreams(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{v1Turn}}),
	}})
	id := g.create(t, "v1")
	stream, err := g.connect.Watch(context.Background(), connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	ended := make(chan struct{})
	go func() {
		for stream.Receive() {
		}
		close(ended)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a watch open: %v", err)
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the watch stream outlived the shutdown")
	}
	// It ends as an interruption, not as if it were done: unavailable,
	// saying where to resume.
	if code := connect.CodeOf(stream.Err()); code != connect.CodeUnavailable || !strings.Contains(stream.Err().Error(), "afterSeq=") {
		t.Errorf("the stream ended with %v, want unavailable and where to resume", stream.Err())
	}
}
