package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// TestListAgentsDescribesEachAgentOnce: ListAgents tells each agent's
// ACP version, info, prompt and session capabilities and auth methods, as
// the agent answered initialize in its version's names; it starts each
// agent once, however often it is called, never shows a command line, and
// tells of an agent that does not start without its cause.
func TestListAgentsDescribesEachAgentOnce(t *testing.T) {
	t.Parallel()
	starts := filepath.Join(t.TempDir(), "starts")
	counted := []agentsim.Step{{Shell: "echo started >> " + starts}}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1": agentCommand(t, agentsim.Script{ProtocolVersion: 1, AuthMethods: []string{"api-key"}, LoadSession: true,
			PromptCapabilities: agentsim.PromptCapabilities{Image: true}, Startup: counted}),
		"v2":     agentCommand(t, agentsim.Script{ProtocolVersion: 2, AuthMethods: []string{"oauth"}, PromptCapabilities: agentsim.PromptCapabilities{Audio: true, EmbeddedContext: true}}),
		"broken": {"/nonexistent/secret-agent-path", "--token=hunter2"},
	}})
	ctx := context.Background()
	var got *acpv2.ListAgentsResponse
	for range 2 {
		res, err := g.connect.ListAgents(ctx, connect.NewRequest(&acpv2.ListAgentsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		got = res.Msg
	}
	js := protojson.Format(got)
	for _, secret := range append([]string{"secret-agent-path", "hunter2"}, agentCommand(t, agentsim.Script{})[0]) {
		if strings.Contains(js, secret) {
			t.Errorf("ListAgents shows %q:\n%s", secret, js)
		}
	}
	if n := len(got.GetAgents()); n != 3 {
		t.Fatalf("%d agents, want 3:\n%s", n, js)
	}
	broken, v1, v2 := got.GetAgents()[0], got.GetAgents()[1], got.GetAgents()[2]
	if broken.GetName() != "broken" || broken.GetError() == "" || broken.GetInfo() != nil {
		t.Errorf("the agent that does not start: %v", broken)
	}
	if v1.GetName() != "v1" || v1.GetProtocolVersion() != 1 || v1.GetInfo().GetName() != "agentsim" || v1.GetError() != "" ||
		!v1.GetPromptCapabilities().GetImage() || v1.GetPromptCapabilities().GetAudio() ||
		strings.Join(v1.GetSessionCapabilities(), ",") != "load" ||
		len(v1.GetAuthMethods()) != 1 || v1.GetAuthMethods()[0].GetId() != "api-key" || v1.GetAuthMethods()[0].GetType() != "agent" {
		t.Errorf("the v1 agent: %v", v1)
	}
	if v2.GetName() != "v2" || v2.GetProtocolVersion() != 2 || v2.GetInfo().GetTitle() == "" ||
		v2.GetPromptCapabilities().GetImage() || !v2.GetPromptCapabilities().GetAudio() || !v2.GetPromptCapabilities().GetEmbeddedContext() ||
		len(v2.GetAuthMethods()) != 1 || v2.GetAuthMethods()[0].GetId() != "oauth" {
		t.Errorf("the v2 agent: %v", v2)
	}
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "started"); n != 1 {
		t.Errorf("the v1 agent was started %d times for two ListAgents, want once", n)
	}
}

// TestPromptHoldsOnlyWhatTheAgentTakes: an image, audio or embedded
// resource block to an agent that did not offer it is refused with
// invalid_argument naming the block, before anything reaches the agent or
// the log; what the agent offered, in either ACP version's shape, passes.
func TestPromptHoldsOnlyWhatTheAgentTakes(t *testing.T) {
	t.Parallel()
	saying := func(text string) agentsim.Turn {
		return agentsim.Turn{Steps: []agentsim.Step{update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}}
	}
	turns := []agentsim.Turn{saying("first"), saying("second")}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"v1":       agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: turns}),
		"v2-image": agentCommand(t, agentsim.Script{ProtocolVersion: 2, Turns: turns, PromptCapabilities: agentsim.PromptCapabilities{Image: true}}),
	}})
	image := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Image{Image: &acpv2.ImageContent{Data: "AAAA", MimeType: "image/png"}}}
	audio := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Audio{Audio: &acpv2.AudioContent{Data: "AAAA", MimeType: "audio/wav"}}}
	resource := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Resource{Resource: &acpv2.EmbeddedResource{
		Resource: &acpv2.EmbeddedResource_TextResource{TextResource: &acpv2.TextResourceContents{Uri: "file:///a.txt", Text: "a"}}}}}
	link := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_ResourceLink{ResourceLink: &acpv2.ResourceLink{Uri: "file:///a.txt", Name: "a.txt"}}}
	ctx := context.Background()
	prompt := func(id string, blocks ...*acpv2.ContentBlock) ([]*acpv2.SessionEvent, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return testutil.Turn(ctx, g.connect, &acpv2.PromptRequest{SessionId: id, Prompt: append(textPrompt("look"), blocks...)}, nil)
	}
	for _, tt := range []struct {
		agent  string
		block  *acpv2.ContentBlock
		refuse string // what the refusal names; "" for none
	}{
		{"v1", image, "image"},
		{"v1", audio, "audio"},
		{"v1", resource, "embedded resource"},
		{"v1", link, ""},
		{"v2-image", image, ""},
		{"v2-image", audio, "audio"},
	} {
		id := g.create(t, tt.agent)
		events, err := prompt(id, tt.block)
		if tt.refuse == "" {
			if err != nil || !strings.Contains(said(events), "first") {
				t.Errorf("%s, a prompt with %v: %v, %v", tt.agent, tt.block, events, err)
			}
			continue
		}
		if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.refuse) {
			t.Errorf("%s, a prompt with %v: %v, want invalid_argument naming %s", tt.agent, tt.block, err, tt.refuse)
		}
		// Nothing of it reached the agent, whose first turn comes next,
		// or the log.
		if seq := snapshot(t, g, id).GetLastSeq(); seq != 0 {
			t.Errorf("%s: the refused prompt left %d events", tt.agent, seq)
		}
		if events, err := prompt(id); err != nil || !strings.Contains(said(events), "first") {
			t.Errorf("%s: the prompt after the refused one: %v, %v; want the agent's first turn", tt.agent, events, err)
		}
	}
}
