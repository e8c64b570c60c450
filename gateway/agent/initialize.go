package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
)

// clientVersion is the version the gateway gives agents in initialize's
// clientInfo (v2 info): its build's (buildinfo).
var clientVersion = buildinfo.Get().Version

// Profile is what an agent said of itself in its answer to initialize,
// read the same way whichever ACP version it negotiated.
type Profile struct {
	// Version is the negotiated ACP version.
	Version acpjson.Version
	// Info is the agent's implementation (v1 agentInfo, v2 info); empty
	// when the agent gave none.
	Info Info
	// AuthMethods are the authentication methods the agent offers, in its
	// order.
	AuthMethods []AuthMethod
	// Prompt says which content beyond text and resource links the agent
	// takes in a prompt.
	Prompt PromptCapabilities
	// Session names the session capabilities the agent advertised, by
	// their ACP names, sorted: the members of v1
	// agentCapabilities.sessionCapabilities and v2 capabilities.session
	// that it offers (an object), but for v2's prompt and mcp, with
	// `load` for v1 agentCapabilities.loadSession. The methods that are
	// baseline in the agent's version are not listed.
	Session []string
	// Capabilities are the optional methods the gateway uses.
	Capabilities Capabilities
	// MCP says which MCP server transports the agent takes.
	MCP MCPTransports
}

// Info describes an agent's implementation (ACP Implementation).
type Info struct {
	Name, Title, Version string
}

// AuthMethod is an authentication method an agent offers.
type AuthMethod struct {
	// ID is the method's id: v1 `id`, v2 `methodId`.
	ID          string
	Name        string
	Description string
	// Type is AuthAgent, AuthTerminal, or another type the gateway does
	// not know. A v1 method without a type is AuthAgent.
	Type string
}

// Authentication method types (ACP AuthMethod.type).
const (
	// AuthAgent is a method the agent runs itself, through authenticate
	// (v1) or auth/login (v2): the only kind the gateway can run.
	AuthAgent = "agent"
	// AuthTerminal is a method for the client to run the agent's command
	// interactively: the gateway advertises no terminal authentication,
	// and cannot run it.
	AuthTerminal = "terminal"
)

// PromptCapabilities say which content blocks beyond text and resource
// links an agent takes in a prompt (ACP promptCapabilities: v1 booleans,
// v2 objects).
type PromptCapabilities struct {
	Image, Audio, EmbeddedContext bool
}

// Capabilities are the optional agent methods the gateway uses.
type Capabilities struct {
	// Load: session/load (ACP v1 agentCapabilities.loadSession).
	Load bool
	// Resume: session/resume (v1 sessionCapabilities.resume, v2 baseline).
	Resume bool
	// Close: session/close (v1 sessionCapabilities.close, v2 baseline).
	Close bool
	// Delete: session/delete (v1 sessionCapabilities.delete, v2
	// capabilities.session.delete).
	Delete bool
	// Logout: v1 logout (agentCapabilities.auth.logout), v2 auth/logout
	// (offered by every agent that lists authentication methods).
	Logout bool
	// List: session/list (v1 sessionCapabilities.list, v2 baseline).
	List bool
}

// Profile returns what the agent said of itself at initialize.
func (a *Agent) Profile() Profile { return a.profile }

// Capabilities returns what the agent offered at initialize.
func (a *Agent) Capabilities() Capabilities { return a.profile.Capabilities }

// AuthMethod returns the agent's authentication method id, if it offers
// one by that id.
func (a *Agent) AuthMethod(id string) (AuthMethod, bool) {
	i := slices.IndexFunc(a.profile.AuthMethods, func(m AuthMethod) bool { return m.ID == id })
	if i < 0 {
		return AuthMethod{}, false
	}
	return a.profile.AuthMethods[i], true
}

// AuthMethodIDs lists the ids of the authentication methods the agent
// offers.
func (a *Agent) AuthMethodIDs() []string {
	ids := make([]string, len(a.profile.AuthMethods))
	for i, m := range a.profile.AuthMethods {
		ids[i] = m.ID
	}
	return ids
}

// Authenticate runs the agent's authentication method id: ACP v2
// auth/login, v1 authenticate.
func (a *Agent) Authenticate(ctx context.Context, id string) error {
	method := "authenticate"
	if a.Version() >= acpjson.V2 {
		method = "auth/login"
	}
	return a.call(ctx, method, map[string]any{"methodId": id}, nil)
}

// Logout asks the agent to end what it authenticated: ACP v2 auth/logout,
// v1 logout. It returns ErrUnsupported for an agent that does not offer it
// (v1: no agentCapabilities.auth.logout; v2: no authentication methods, when
// a client must not call it).
func (a *Agent) Logout(ctx context.Context) error {
	if !a.Capabilities().Logout {
		return ErrUnsupported
	}
	method := "logout"
	if a.Version() >= acpjson.V2 {
		method = "auth/logout"
	}
	return a.call(ctx, method, map[string]any{}, nil)
}

// initializeResult is the answer to initialize, in the names of both ACP
// versions.
type initializeResult struct {
	ProtocolVersion int `json:"protocolVersion"`
	AuthMethods     []struct {
		ID          string `json:"id"`       // v1
		MethodID    string `json:"methodId"` // v2
		Name        string `json:"name"`
		Description string `json:"description"`
		Type        string `json:"type"`
	} `json:"authMethods"`
	// v1
	AgentInfo         *implementation `json:"agentInfo"`
	AgentCapabilities struct {
		LoadSession         bool                       `json:"loadSession"`
		PromptCapabilities  map[string]json.RawMessage `json:"promptCapabilities"`
		SessionCapabilities map[string]json.RawMessage `json:"sessionCapabilities"`
		MCPCapabilities     map[string]json.RawMessage `json:"mcpCapabilities"`
		Auth                struct {
			Logout json.RawMessage `json:"logout"`
		} `json:"auth"`
	} `json:"agentCapabilities"`
	// v2
	Info         *implementation `json:"info"`
	Capabilities struct {
		Session json.RawMessage `json:"session"`
	} `json:"capabilities"`
}

type implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Version string `json:"version"`
}

// offered says whether a capability's value offers it: in v2 (and for v1's
// session capabilities) an object, even {}; omitted or null does not. A
// v1 prompt capability is a boolean, true.
func offered(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '{' || string(raw) == "true")
}

// elicitationCapability is the gateway's clientCapabilities.elicitation
// (v1) and capabilities.elicitation (v2), the same shape in both: form and
// url elicitations are relayed to the session's clients.
var elicitationCapability = map[string]any{"form": map[string]any{}, "url": map[string]any{}}

func (a *Agent) initialize(ctx context.Context) error {
	params := map[string]any{
		"protocolVersion": clientProtocolVersion,
		// v1 names.
		"clientCapabilities": map[string]any{
			"fs":       map[string]any{"readTextFile": true, "writeTextFile": true},
			"terminal": false,
			// Relayed to the session's clients, as permission requests are.
			"elicitation": elicitationCapability,
		},
		"clientInfo": map[string]any{"name": "acp-gateway", "version": clientVersion},
		// v2 names.
		"info":         map[string]any{"name": "acp-gateway", "version": clientVersion},
		"capabilities": map[string]any{"elicitation": elicitationCapability},
	}
	var res initializeResult
	err := a.call(ctx, "initialize", params, &res)
	switch {
	case a.echoed.Load():
		return fmt.Errorf("agent: initialize: %w: it sent the gateway's initialize request back, as a program that echoes its input (cat) does", ErrNotACP)
	case err != nil && a.Reason() == ReasonProtocolError:
		return fmt.Errorf("agent: initialize: %w: its output is not ACP's JSON-RPC: %w", ErrNotACP, err)
	case err != nil:
		return fmt.Errorf("agent: initialize: %w", err)
	}
	switch res.ProtocolVersion {
	case 1, 2:
		a.version.Store(int64(res.ProtocolVersion))
	case 0:
		return fmt.Errorf("agent: initialize: %w: its answer has no protocolVersion", ErrNotACP)
	default:
		return fmt.Errorf("agent: initialize: unsupported protocol version %d (the gateway speaks 1 and 2)", res.ProtocolVersion)
	}
	a.profile = res.profile(a.Version())
	return nil
}

// profile reads the answer of an agent that negotiated version v.
func (res *initializeResult) profile(v acpjson.Version) Profile {
	p := Profile{Version: v}
	info := res.AgentInfo
	if v >= acpjson.V2 {
		info = res.Info
	}
	if info != nil {
		p.Info = Info{Name: info.Name, Title: info.Title, Version: info.Version}
	}
	for _, m := range res.AuthMethods {
		id := cmp.Or(m.ID, m.MethodID)
		if v >= acpjson.V2 {
			id = cmp.Or(m.MethodID, m.ID)
		}
		if id == "" {
			continue
		}
		p.AuthMethods = append(p.AuthMethods, AuthMethod{ID: id, Name: m.Name, Description: m.Description, Type: cmp.Or(m.Type, AuthAgent)})
	}
	var prompt, session map[string]json.RawMessage
	if v == acpjson.V1 {
		prompt, session = res.AgentCapabilities.PromptCapabilities, res.AgentCapabilities.SessionCapabilities
		p.Capabilities.Load = res.AgentCapabilities.LoadSession
		p.Capabilities.Resume = offered(session["resume"])
		p.Capabilities.Close = offered(session["close"])
		p.Capabilities.List = offered(session["list"])
		p.MCP = mcpTransports(v, res.AgentCapabilities.MCPCapabilities, nil)
		if p.Capabilities.Load {
			p.Session = append(p.Session, "load")
		}
	} else {
		// In v2 session/resume is one of the baseline session methods;
		// the gateway takes it that an agent offering session
		// capabilities at all keeps its sessions.
		p.Capabilities.Resume = offered(res.Capabilities.Session)
		p.Capabilities.Close = p.Capabilities.Resume
		p.Capabilities.List = p.Capabilities.Resume
		if p.Capabilities.Resume {
			_ = json.Unmarshal(res.Capabilities.Session, &session)
			var sub map[string]json.RawMessage
			if json.Unmarshal(session["prompt"], &sub) == nil {
				prompt = sub
			}
			delete(session, "prompt")
			p.MCP = mcpTransports(v, nil, session["mcp"])
			delete(session, "mcp")
		}
	}
	p.Capabilities.Delete = offered(session["delete"])
	if v == acpjson.V1 {
		p.Capabilities.Logout = offered(res.AgentCapabilities.Auth.Logout)
	} else {
		// v2: "Agents MUST support this method when their initialize
		// response advertised at least one valid authentication method."
		p.Capabilities.Logout = len(p.AuthMethods) > 0
	}
	p.Prompt = PromptCapabilities{Image: offered(prompt["image"]), Audio: offered(prompt["audio"]), EmbeddedContext: offered(prompt["embeddedContext"])}
	for name, raw := range session {
		if name != "_meta" && offered(raw) {
			p.Session = append(p.Session, name)
		}
	}
	slices.Sort(p.Session)
	return p
}
