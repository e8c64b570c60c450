package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// implementation is the `agentInfo` (v1) or `info` (v2) of the bridge.
func (b *bridge) implementation() map[string]any {
	return map[string]any{
		"name":    "acp-gateway",
		"title":   "acp-gateway: " + b.opts.Agent,
		"version": b.opts.Version,
	}
}

// initialize negotiates the protocol version: 2 when the editor asks for 2
// or more, else 1.
func (b *bridge) initialize(params json.RawMessage) (any, error) {
	var p struct {
		ProtocolVersion json.Number `json:"protocolVersion"`
		// v1 names, v2 names.
		ClientCapabilities clientCapabilities `json:"clientCapabilities"`
		Capabilities       clientCapabilities `json:"capabilities"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("initialize: %v", err)
	}
	asked, _ := p.ProtocolVersion.Float64()
	v := acpjson.V1
	caps := p.ClientCapabilities
	if asked >= 2 {
		v = acpjson.V2
		caps = p.Capabilities
	}
	b.mu.Lock()
	b.version = v
	b.elicit = caps.elicitModes()
	b.mu.Unlock()
	if v == acpjson.V1 {
		return map[string]any{
			"protocolVersion": 1,
			"agentCapabilities": map[string]any{
				// session/load replays the gateway's event log.
				"loadSession": true,
				// Only the baseline: the bridge cannot know what the
				// gateway's agent accepts.
				"promptCapabilities": map[string]any{"image": false, "audio": false, "embeddedContext": false},
				// The editor's servers are passed on; the gateway
				// refuses those its allowlist or its agent does not take.
				"mcpCapabilities": map[string]any{"http": true, "sse": true},
				"sessionCapabilities": map[string]any{
					"list": map[string]any{}, "resume": map[string]any{}, "close": map[string]any{},
				},
			},
			// The bridge authenticates to the gateway with its token.
			"authMethods": []any{},
			"agentInfo":   b.implementation(),
		}, nil
	}
	return map[string]any{
		"protocolVersion": 2,
		"info":            b.implementation(),
		// The baseline session methods: new, list, resume, close, prompt,
		// cancel, update.
		"capabilities": map[string]any{"session": map[string]any{
			// As in v1: the gateway decides.
			"mcp": map[string]any{"stdio": map[string]any{}, "http": map[string]any{}},
		}},
		"authMethods": []any{},
	}, nil
}

// checkGateway checks that the gateway answers, takes the bridge's token
// and has the bridge's agent (Options.CheckGateway).
func (b *bridge) checkGateway(ctx context.Context) error {
	res, err := b.client.ListAgents(ctx, connect.NewRequest(&acpv2.ListAgentsRequest{}))
	if err != nil {
		return rpcError("initialize (asking the gateway for its agents)", err)
	}
	if b.opts.Agent == "" {
		return nil
	}
	var names []string
	for _, a := range res.Msg.GetAgents() {
		if a.GetName() == b.opts.Agent {
			return nil
		}
		names = append(names, a.GetName())
	}
	return &jsonrpc2.Error{Code: codeInternal,
		Message: fmt.Sprintf("acp-gateway initialize failed: the gateway has no agent %q (it has %s); check --agent", b.opts.Agent, strings.Join(names, ", "))}
}

// newSession creates a gateway session of the configured agent.
func (b *bridge) newSession(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Cwd        string            `json:"cwd"`
		McpServers []json.RawMessage `json:"mcpServers"`
		Meta       struct {
			Gateway struct {
				Agent string `json:"agent"`
			} `json:"acpGateway"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("session/new: %v", err)
	}
	agent := b.opts.Agent
	if name := p.Meta.Gateway.Agent; name != "" {
		if !b.opts.ChooseAgent {
			return nil, invalidParams("session/new: this connection runs agent %q; _meta.acpGateway.agent cannot choose another", agent)
		}
		agent = name
	}
	cwd := b.opts.Cwd
	if cwd == "" {
		cwd = p.Cwd
	}
	if cwd == "" || !filepath.IsAbs(cwd) {
		return nil, invalidParams("session/new: cwd must be an absolute path, got %q", cwd)
	}
	mcp, err := mcpServers(p.McpServers)
	if err != nil {
		return nil, err
	}
	res, err := b.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent, Cwd: cwd, McpServers: mcp}))
	if err != nil {
		return nil, rpcError("CreateSession", err)
	}
	id := res.Msg.GetSessionId()
	b.follow(b.sessionFor(id, true))
	b.log.Info("session created", "session", id, "agent", agent, "cwd", cwd)
	return map[string]any{"sessionId": id}, nil
}

// sessionParams are the members of session/load, session/resume and
// session/close the bridge reads.
type sessionParams struct {
	SessionID  string `json:"sessionId"`
	ReplayFrom *struct {
		Type string `json:"type"`
	} `json:"replayFrom"`
}

func parseSessionParams(method string, params json.RawMessage) (sessionParams, error) {
	var p sessionParams
	if err := json.Unmarshal(params, &p); err != nil {
		return p, invalidParams("%s: %v", method, err)
	}
	if p.SessionID == "" {
		return p, invalidParams("%s: sessionId is required", method)
	}
	return p, nil
}

// loadSession (ACP v1 session/load) replays the session's history from the
// gateway's event log and answers when the editor has had all of it.
func (b *bridge) loadSession(ctx context.Context, params json.RawMessage) (any, error) {
	return b.reattach(ctx, "session/load", params, true)
}

// resumeSession attaches to a gateway session; with ACP v2's
// `replayFrom: {"type": "start"}` it replays the history first, as
// session/load does.
func (b *bridge) resumeSession(ctx context.Context, params json.RawMessage) (any, error) {
	return b.reattach(ctx, "session/resume", params, false)
}

// reattach serves session/load and session/resume: it makes the gateway
// session known to the bridge, checking that it exists, and replays its
// history when replay is set or the params ask for it.
func (b *bridge) reattach(ctx context.Context, method string, params json.RawMessage, replay bool) (any, error) {
	p, err := parseSessionParams(method, params)
	if err != nil {
		return nil, err
	}
	res, err := b.client.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: p.SessionID}))
	if err != nil {
		return nil, rpcError("GetSession", err)
	}
	s := b.sessionFor(p.SessionID, false)
	lastSeq := res.Msg.GetSession().GetLastSeq()
	if replay || p.ReplayFrom != nil && p.ReplayFrom.Type == "start" {
		if err := b.replay(ctx, s, lastSeq); err != nil {
			return nil, err
		}
	}
	// What follows the history is news; unless the session is followed
	// already, from a point its client had (Resume), which goes on from
	// there.
	s.mu.Lock()
	followed := s.stopFollow != nil
	s.mu.Unlock()
	if !followed {
		s.out.Lock()
		s.lastSeq = max(s.lastSeq, lastSeq)
		b.stream.reached(s.id, Position{Seq: s.lastSeq})
		s.out.Unlock()
	}
	b.follow(s)
	return struct{}{}, nil
}

// replay sends the editor session s's events up to lastSeq, as history.
func (b *bridge) replay(ctx context.Context, s *session, lastSeq uint64) error {
	if lastSeq == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := b.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: s.id}))
	if err != nil {
		cancel()
		return rpcError("Watch", err)
	}
	// A watch never ends by itself: cancel before Close, which would
	// otherwise wait for its end.
	defer func() {
		cancel()
		_ = stream.Close()
	}()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue // heartbeat
		}
		s.out.Lock()
		b.emitLocked(s, ev, true)
		s.out.Unlock()
		if ev.GetSeq() >= lastSeq {
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return rpcError("Watch", err)
	}
	return &jsonrpc2.Error{Code: codeInternal, Message: "acp-gateway Watch ended before the session's history was replayed"}
}

// listSessions lists the caller's open gateway sessions of the bridge's
// agent (of every agent with ChooseAgent), of one working directory when
// the editor names one.
func (b *bridge) listSessions(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Cwd string `json:"cwd"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("session/list: %v", err)
	}
	cwd := p.Cwd
	if cwd != "" && b.opts.Cwd != "" {
		cwd = b.opts.Cwd
	}
	res, err := b.client.ListSessions(ctx, connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if err != nil {
		return nil, rpcError("ListSessions", err)
	}
	sessions := []any{}
	for _, s := range res.Msg.GetSessions() {
		if !b.opts.ChooseAgent && s.GetAgent() != b.opts.Agent || s.GetState() == "closed" || cwd != "" && s.GetCwd() != cwd {
			continue
		}
		gw := map[string]any{"agent": s.GetAgent(), "state": s.GetState(), "lastSeq": s.GetLastSeq()}
		if t := s.GetCreatedAt(); t != nil {
			gw["createdAt"] = t.AsTime().Format(time.RFC3339)
		}
		sessions = append(sessions, map[string]any{
			"sessionId": s.GetSessionId(),
			"cwd":       s.GetCwd(),
			"_meta":     map[string]any{"acpGateway": gw},
		})
	}
	return map[string]any{"sessions": sessions}, nil
}

// closeSession closes a gateway session.
func (b *bridge) closeSession(ctx context.Context, params json.RawMessage) (any, error) {
	p, err := parseSessionParams("session/close", params)
	if err != nil {
		return nil, err
	}
	if err := b.closeGatewaySession(ctx, p.SessionID); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// closeGatewaySession closes session id and forgets it.
func (b *bridge) closeGatewaySession(ctx context.Context, id string) error {
	if _, err := b.client.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
		return rpcError("CloseSession", err)
	}
	b.mu.Lock()
	s := b.sessions[id]
	delete(b.sessions, id)
	b.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		if s.stopFollow != nil {
			s.stopFollow()
		}
		s.mu.Unlock()
	}
	b.log.Info("session closed", "session", id)
	return nil
}

// setMode relays ACP v1 session/set_mode.
func (b *bridge) setMode(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("session/set_mode: %v", err)
	}
	if _, err := b.client.SetMode(ctx, connect.NewRequest(&acpv2.SetModeRequest{SessionId: p.SessionID, ModeId: p.ModeID})); err != nil {
		return nil, rpcError("SetMode", err)
	}
	return struct{}{}, nil
}

// setConfigOption relays session/set_config_option: a string value is a
// value id, a boolean a boolean option's value.
func (b *bridge) setConfigOption(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		SessionID string          `json:"sessionId"`
		ConfigID  string          `json:"configId"`
		Value     json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("session/set_config_option: %v", err)
	}
	req := &acpv2.SetConfigOptionRequest{SessionId: p.SessionID, ConfigId: p.ConfigID}
	var id string
	var flag bool
	switch {
	case json.Unmarshal(p.Value, &id) == nil:
		req.Value = &acpv2.SetConfigOptionRequest_ValueId{ValueId: id}
	case json.Unmarshal(p.Value, &flag) == nil:
		req.Value = &acpv2.SetConfigOptionRequest_Boolean{Boolean: flag}
	default:
		return nil, invalidParams("session/set_config_option: value must be a value id (a string) or a boolean")
	}
	res, err := b.client.SetConfigOption(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, rpcError("SetConfigOption", err)
	}
	v := b.negotiated()
	opts := make([]json.RawMessage, 0, len(res.Msg.GetConfigOptions()))
	for _, o := range res.Msg.GetConfigOptions() {
		js, err := acpjson.Encode(o, v)
		if err != nil {
			return nil, fmt.Errorf("encoding config option %q: %w", o.GetId(), err)
		}
		opts = append(opts, js)
	}
	return map[string]any{"configOptions": opts}, nil
}
