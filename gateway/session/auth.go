package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// authenticate runs agent a's authentication method id, as the agent's ACP
// version has it (v2 auth/login, v1 authenticate). A method the agent does
// not offer, or one the gateway cannot run, is ErrInvalid; the agent's
// refusal is told as agentCallErr tells it.
func authenticate(ctx context.Context, a *agent.Agent, id string) error {
	m, ok := a.AuthMethod(id)
	switch {
	case !ok:
		return fmt.Errorf("%w: the agent offers no authentication method %q (it offers %v)", ErrInvalid, id, a.AuthMethodIDs())
	case m.Type != agent.AuthAgent:
		return fmt.Errorf("%w: the agent's authentication method %q is of type %q, which the gateway cannot run: only the agent's own (type %q) can be", ErrInvalid, id, m.Type, agent.AuthAgent)
	}
	method := "authenticate"
	if a.Version() >= acpjson.V2 {
		method = "auth/login"
	}
	if err := a.Authenticate(ctx, id); err != nil {
		return agentCallErr(method, err)
	}
	return nil
}

// Logout asks the session's agent to end what it authenticated (ACP v2
// auth/logout, v1 logout), re-attaching a lost agent first. An agent that
// does not offer it is ErrUnsupported; its refusal is told as agentCallErr
// tells it.
func (s *Session) Logout(ctx context.Context) error {
	a, _, err := s.liveAgent(ctx)
	if err != nil {
		return err
	}
	method := "logout"
	if a.Version() >= acpjson.V2 {
		method = "auth/logout"
	}
	if err := a.Logout(ctx); err != nil {
		if errors.Is(err, agent.ErrUnsupported) {
			return fmt.Errorf("%w: the agent does not offer %s", ErrUnsupported, method)
		}
		return agentCallErr(method, err)
	}
	return nil
}
