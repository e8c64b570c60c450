package service

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// ListAgents implements acpv2connect.SessionServiceHandler. It answers
// from this replica's configuration: the replicas of one gateway share it.
func (s *Service) ListAgents(ctx context.Context, _ *connect.Request[acpv2.ListAgentsRequest]) (*connect.Response[acpv2.ListAgentsResponse], error) {
	list, err := s.mgr.Agents(ctx, s.user(ctx))
	if err != nil {
		return nil, toConnect(err)
	}
	out := &acpv2.ListAgentsResponse{Agents: make([]*acpv2.AgentDescription, len(list))}
	for i, a := range list {
		out.Agents[i] = describeAgent(a)
	}
	return connect.NewResponse(out), nil
}

// describeAgent is the description of a, which never holds its command
// line.
func describeAgent(a session.AgentProfile) *acpv2.AgentDescription {
	d := &acpv2.AgentDescription{Name: a.Name}
	if a.Err != nil {
		d.Error = a.Err.Error()
		return d
	}
	p := a.Profile
	d.Info = &acpv2.AgentInfo{Name: p.Info.Name, Title: p.Info.Title, Version: p.Info.Version}
	d.ProtocolVersion = uint32(p.Version)
	d.PromptCapabilities = &acpv2.PromptCapabilities{Image: p.Prompt.Image, Audio: p.Prompt.Audio, EmbeddedContext: p.Prompt.EmbeddedContext}
	d.SessionCapabilities = p.Session
	for _, m := range p.AuthMethods {
		d.AuthMethods = append(d.AuthMethods, authMethod(m))
	}
	return d
}

func authMethod(m agent.AuthMethod) *acpv2.AuthMethod {
	return &acpv2.AuthMethod{Id: m.ID, Name: m.Name, Description: m.Description, Type: m.Type}
}

// ListAgentSessions implements acpv2connect.SessionServiceHandler: the
// sessions the agent keeps in the caller's workspace, which
// CreateSession may adopt. It starts the agent on this replica.
func (s *Service) ListAgentSessions(ctx context.Context, req *connect.Request[acpv2.ListAgentSessionsRequest]) (*connect.Response[acpv2.ListAgentSessionsResponse], error) {
	if err := checkID("agent", req.Msg.GetAgent()); err != nil {
		return nil, err
	}
	list, truncated, err := s.mgr.AgentSessions(ctx, s.user(ctx), req.Msg.GetAgent())
	if err != nil {
		return nil, toConnect(err)
	}
	out := &acpv2.ListAgentSessionsResponse{Sessions: make([]*acpv2.AgentSession, len(list)), Truncated: truncated}
	for i, as := range list {
		out.Sessions[i] = &acpv2.AgentSession{AgentSessionId: as.ID, Cwd: as.Cwd, Title: as.Title}
		if !as.UpdatedAt.IsZero() {
			out.Sessions[i].UpdatedAt = timestamppb.New(as.UpdatedAt)
		}
	}
	return connect.NewResponse(out), nil
}
