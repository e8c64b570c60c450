package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// CloseSession asks an agent that offers session/close to close its
// session before it is stopped (ACP v1 sessionCapabilities.close, v2
// baseline), so that it frees what it holds for it; a shutdown does not,
// so that the session can be resumed.
func TestCloseClosesTheAgentsSession(t *testing.T) {
	for _, v := range []int{1, 2} {
		for _, shutdown := range []bool{false, true} {
			closed := filepath.Join(t.TempDir(), "closed")
			cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: v, Close: true, SessionsFile: closed})
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
			case !shutdown && (err != nil || string(b) != "close "+agentSID+"\n"):
				t.Errorf("v%d: the agent closed %q (%v), want %s", v, b, err, agentSID)
			}
		}
	}
}

// DeleteSession asks an agent that offers session/delete to delete its
// history of the session, closes it, and leaves nothing of it in the
// store.
func TestDeleteRemovesTheSessionEverywhere(t *testing.T) {
	for _, v := range []int{1, 2} {
		file := filepath.Join(t.TempDir(), "sessions")
		cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: v, Close: true, Delete: true, SessionsFile: file})
		if err != nil {
			t.Fatal(err)
		}
		m := NewManager(Options{IdleTimeout: -1, Agents: map[string][]string{"sim": cmd}})
		ctx := context.Background()
		s, err := m.Create(ctx, "", "sim", t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		agentSID := s.agentSessionID
		s.mu.Unlock()
		if err := s.Delete(); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if _, err := m.opts.Store.GetSession(ctx, s.ID()); !errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("v%d: the store still has the session: %v", v, err)
		}
		if _, err := m.Get(ctx, "", s.ID()); !errors.Is(err, ErrNotFound) {
			t.Errorf("v%d: Get of a deleted session: %v, want ErrNotFound", v, err)
		}
		m.Close()
		if b, err := os.ReadFile(file); err != nil || string(b) != "delete "+agentSID+"\nclose "+agentSID+"\n" {
			t.Errorf("v%d: the agent was asked %q (%v), want delete, then close", v, b, err)
		}
	}
}
