package storetest

import (
	"bytes"
	"context"
	"testing"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// mcpServers is a session's MCPServers as the gateway might encode them:
// opaque bytes to a store, with a secret in them.
var mcpServers = []byte(`[{"transport":"http","name":"docs","url":"https://mcp.example.com/","headers":[{"name":"Authorization","value":"Bearer s3cret"}]}]`)

// testMCPServers checks that a record's MCPServers are kept as given,
// through the record's updates, apart from the slices the caller holds.
func testMCPServers(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	rec := session("a", "alice")
	rec.MCPServers = bytes.Clone(mcpServers)
	if err := s.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.MCPServers[0] = 'X' // the caller's slice is not the store's
	if err := s.CreateSession(ctx, session("b", "alice")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAgentSession(ctx, "a", "sess_1", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "a", statestore.StateReady, ""); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "a", 1, 3)
	got, err := s.GetSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.MCPServers, mcpServers) {
		t.Fatalf("GetSession's MCPServers = %q, want %q", got.MCPServers, mcpServers)
	}
	got.MCPServers[0] = 'X' // nor is the reader's
	list, err := s.ListSessions(ctx, "alice")
	if err != nil || len(list) != 2 {
		t.Fatalf("ListSessions = %v, %v", ids(list), err)
	}
	if !bytes.Equal(list[0].MCPServers, mcpServers) || len(list[1].MCPServers) != 0 {
		t.Fatalf("ListSessions' MCPServers = %q, %q; want %q and none", list[0].MCPServers, list[1].MCPServers, mcpServers)
	}
}

// testMCPServersRestart checks that MCPServers survive a restart.
func testMCPServersRestart(t *testing.T, s statestore.Store, reopen func(*testing.T, statestore.Store) statestore.Store) {
	ctx := context.Background()
	rec := session("a", "alice")
	rec.MCPServers = bytes.Clone(mcpServers)
	if err := s.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	got, err := s.GetSession(ctx, "a")
	if err != nil || !bytes.Equal(got.MCPServers, mcpServers) {
		t.Fatalf("MCPServers after restart = %q, %v; want %q", got.MCPServers, err, mcpServers)
	}
}
