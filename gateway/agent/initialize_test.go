package agent

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

// TestProfileReadsEachVersionsNames reads initialize answers shaped as
// each ACP version's schema has them: v1 `id`, agentInfo and boolean
// prompt capabilities; v2 `methodId` and `type`, info, and capability
// objects under capabilities.session.
func TestProfileReadsEachVersionsNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		version acpjson.Version
		answer  string
		want    Profile
	}{{
		name:    "v1",
		version: acpjson.V1,
		answer: `{"protocolVersion":1,
			"agentInfo":{"name":"a1","title":"Agent One","version":"1.2.3"},
			"authMethods":[{"id":"api-key","name":"API key","description":"from the environment"},
				{"id":"tui","name":"Log in","type":"terminal","args":["--login"]},{"name":"no id"}],
			"agentCapabilities":{"loadSession":true,
				"promptCapabilities":{"image":true,"audio":false,"embeddedContext":true},
				"sessionCapabilities":{"resume":{},"list":{},"close":null,"_meta":{}},
				"mcpCapabilities":{"http":false,"sse":true},"auth":{"logout":{}}}}`,
		want: Profile{
			Version: acpjson.V1,
			Info:    Info{Name: "a1", Title: "Agent One", Version: "1.2.3"},
			AuthMethods: []AuthMethod{
				{ID: "api-key", Name: "API key", Description: "from the environment", Type: AuthAgent},
				{ID: "tui", Name: "Log in", Type: AuthTerminal},
			},
			Prompt:       PromptCapabilities{Image: true, EmbeddedContext: true},
			Session:      []string{"list", "load", "resume"},
			Capabilities: Capabilities{Load: true, Resume: true, Logout: true, List: true},
			MCP:          MCPTransports{Stdio: true, SSE: true},
		},
	}, {
		name:    "v2",
		version: acpjson.V2,
		answer: `{"protocolVersion":2,
			"info":{"name":"a2","version":"2.0.0"},
			"authMethods":[{"methodId":"oauth","name":"OAuth","type":"agent"},{"methodId":"x","name":"X","type":"_custom"}],
			"capabilities":{"session":{"prompt":{"image":{},"audio":null},"mcp":{"http":{}},"delete":{},"additionalDirectories":null}}}`,
		want: Profile{
			Version: acpjson.V2,
			Info:    Info{Name: "a2", Version: "2.0.0"},
			AuthMethods: []AuthMethod{
				{ID: "oauth", Name: "OAuth", Type: AuthAgent},
				{ID: "x", Name: "X", Type: "_custom"},
			},
			Prompt:  PromptCapabilities{Image: true},
			Session: []string{"delete"},
			// v2 agents with authentication methods offer auth/logout.
			Capabilities: Capabilities{Resume: true, Close: true, Delete: true, Logout: true, List: true},
			MCP:          MCPTransports{HTTP: true},
		},
	}, {
		name:    "v2 with nothing",
		version: acpjson.V2,
		answer:  `{"protocolVersion":2,"info":{"name":"bare","version":"0"},"agentInfo":{"name":"v1 name","version":"1"}}`,
		want:    Profile{Version: acpjson.V2, Info: Info{Name: "bare", Version: "0"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var res initializeResult
			if err := json.Unmarshal([]byte(tt.answer), &res); err != nil {
				t.Fatal(err)
			}
			if got := res.profile(tt.version); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("profile:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestAuthenticateUsesTheNegotiatedVersionsMethod: a v2 agent is sent
// auth/login, a v1 agent authenticate; the scripted agent knows only its
// own version's method, and then lets a session be made.
func TestAuthenticateUsesTheNegotiatedVersionsMethod(t *testing.T) {
	t.Parallel()
	for _, v := range []int{1, 2} {
		a, _ := startAgent(t, agentsim.Script{ProtocolVersion: v, AuthMethods: []string{"api-key"}}, 0)
		if got := a.AuthMethodIDs(); !reflect.DeepEqual(got, []string{"api-key"}) {
			t.Fatalf("v%d: auth methods %v, want [api-key]", v, got)
		}
		ctx := context.Background()
		if _, err := a.NewSession(ctx, t.TempDir()); err == nil {
			t.Fatalf("v%d: session/new before authentication succeeded", v)
		}
		if err := a.Authenticate(ctx, "api-key"); err != nil {
			t.Fatalf("v%d: authenticate: %v", v, err)
		}
		if _, err := a.NewSession(ctx, t.TempDir()); err != nil {
			t.Fatalf("v%d: session/new after authentication: %v", v, err)
		}
	}
}

// TestInitializeTellsTheGatewaysVersion: initialize's clientInfo (v2
// info) carries the gateway's build version. Not parallel: it sets the
// version, which the parallel tests read only after it.
func TestInitializeTellsTheGatewaysVersion(t *testing.T) {
	defer func(v string) { clientVersion = v }(clientVersion)
	clientVersion = "v1.2.3-test"
	p := newPipeAgent(t, &recorder{}, DefaultMaxLine, acpjson.V1)
	done := make(chan error, 1)
	go func() { done <- p.initialize(context.Background()) }()
	req := p.next(t)
	params, _ := req["params"].(map[string]any)
	for _, field := range []string{"clientInfo", "info"} {
		if info, _ := params[field].(map[string]any); info["name"] != "acp-gateway" || info["version"] != "v1.2.3-test" {
			t.Errorf("initialize's %s is %v, want the gateway's name and version", field, params[field])
		}
	}
	p.send(t, `{"jsonrpc":"2.0","id":`+strconv.Itoa(int(req["id"].(float64)))+`,"result":{"protocolVersion":1}}`+"\n")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// initialize advertises form and url elicitation, in v1's
// clientCapabilities and v2's capabilities alike (the same shape in both).
func TestInitializeAdvertisesElicitation(t *testing.T) {
	t.Parallel()
	p := newPipeAgent(t, &recorder{}, DefaultMaxLine, acpjson.V1)
	done := make(chan error, 1)
	go func() { done <- p.initialize(context.Background()) }()
	req := p.next(t)
	params, _ := req["params"].(map[string]any)
	for _, field := range []string{"clientCapabilities", "capabilities"} {
		caps, _ := params[field].(map[string]any)
		el, _ := caps["elicitation"].(map[string]any)
		form, isForm := el["form"].(map[string]any)
		url, isURL := el["url"].(map[string]any)
		if !isForm || !isURL || len(form) != 0 || len(url) != 0 {
			t.Errorf("initialize's %s.elicitation is %v, want {form: {}, url: {}}", field, caps["elicitation"])
		}
	}
	p.send(t, `{"jsonrpc":"2.0","id":`+strconv.Itoa(int(req["id"].(float64)))+`,"result":{"protocolVersion":2}}`+"\n")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
