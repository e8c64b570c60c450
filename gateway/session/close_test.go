package session

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

// CloseSession asks an agent that offers session/close to close its
// session before it is stopped (ACP v1 sessionCapabilities.close, v2
// baseline), so that it frees what it holds for it; a shutdown does not,
// so that the session can be resumed.
func TestCloseClosesTheAgentsSession(t *testing.T) {
	for _, v := range []int{1, 2} {
		for _, shutdown := range []bool{false, true} {
			closed := filepath.Join(t.TempDir(), "closed")
			cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: v, Close: true, ClosedFile: closed})
			if err != nil {
				t.Fatal(err)
			}
			m := NewManager(Options{IdleTimeout: -1, Agents: map[string][]string{"sim": cmd}})
			s, err := m.Create(context.Background(), "", "sim", t.TempDir(), "")
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			agentSID := s.agentSessionID
			s.mu.Unlock()
			if !shutdown {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			m.Close()
			b, err := os.ReadFile(closed)
			switch {
			case shutdown && !os.IsNotExist(err):
				t.Errorf("v%d: a shutdown closed the agent's session: %q, %v", v, b, err)
			case !shutdown && (err != nil || string(b) != agentSID+"\n"):
				t.Errorf("v%d: the agent closed %q (%v), want %s", v, b, err, agentSID)
			}
		}
	}
}
