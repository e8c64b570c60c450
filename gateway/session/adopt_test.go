package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Two replicas sharing a store cannot both adopt one agent session: the
// check for a gateway session holding it and the record of the adopting
// one are made under a lease of their own, and once the record is made,
// it holds the agent session (on any replica) until it is closed.
func TestClaimsOnAnAgentSessionAcrossReplicas(t *testing.T) {
	st := newSharedMemory()
	a := NewManager(Options{Store: st, Replica: "a", IdleTimeout: -1, LeaseTTL: time.Hour})
	defer a.Close()
	b := NewManager(Options{Store: st, Replica: "b", IdleTimeout: -1, LeaseTTL: time.Hour})
	defer b.Close()
	ctx := context.Background()

	release, err := a.claim(ctx, "sim", "agent-s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.claim(ctx, "sim", "agent-s1"); !errors.Is(err, ErrAdopted) {
		t.Fatalf("replica b's claim while a checks and records: %v, want ErrAdopted", err)
	}
	if rb, err := b.claim(ctx, "sim", "agent-s2"); err != nil {
		t.Fatalf("another agent session: %v", err)
	} else {
		rb()
	}
	rec := &statestore.Session{ID: "s1", Owner: "alice", Agent: "sim", Cwd: "/", AgentSessionID: "agent-s1",
		State: statestore.StateStarting, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	release()
	for _, state := range []statestore.State{statestore.StateReady, statestore.StateAgentLost} {
		if err := st.SetState(ctx, "s1", state, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := b.claim(ctx, "sim", "agent-s1"); !errors.Is(err, ErrAdopted) {
			t.Fatalf("replica b's claim of an agent session a %s session holds: %v, want ErrAdopted", state, err)
		}
	}
	if rb, err := b.claim(ctx, "other-agent", "agent-s1"); err != nil {
		t.Fatalf("the same id of another agent: %v", err)
	} else {
		rb()
	}
	if err := st.SetState(ctx, "s1", statestore.StateClosed, ""); err != nil {
		t.Fatal(err)
	}
	rb, err := b.claim(ctx, "sim", "agent-s1")
	if err != nil {
		t.Fatalf("once the holder closed: %v", err)
	}
	rb()
	if holder, _ := st.LeaseHolder(ctx, claimKey("sim", "agent-s1")); holder != "" {
		t.Errorf("the claim's lease is still held by %q once released", holder)
	}
}

// A listing stops at maxListPages pages of session/list, and says so.
func TestAgentSessionsStopAtTheirBounds(t *testing.T) {
	cwd := t.TempDir()
	var listed []agentsim.ListedSession
	for i := range maxListPages + 1 {
		listed = append(listed, agentsim.ListedSession{SessionID: fmt.Sprint("s", i), Cwd: cwd})
	}
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 1, List: true, ListedSessions: listed, ListPageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{IdleTimeout: -1, Agents: map[string][]string{"sim": cmd}, AdoptAgentSessions: true})
	defer m.Close()
	list, truncated, err := m.AgentSessions(context.Background(), "", "sim")
	if err != nil || !truncated || len(list) != maxListPages || list[maxListPages-1].ID != fmt.Sprint("s", maxListPages-1) {
		t.Fatalf("%d sessions, truncated %v, %v; want the first %d, truncated", len(list), truncated, err, maxListPages)
	}
}

// An agent started to list a user's sessions counts in no limit of
// sessions: a user's listings (and adoptions, which list) take turns, so
// that one client cannot keep any number of agents starting at once.
// Another user's do not wait.
func TestListingsOfAUserTakeTurns(t *testing.T) {
	var l listers
	ctx := context.Background()
	done, err := l.take(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.take(ctx, "bob")
	if err != nil {
		t.Fatalf("bob's listing while alice's runs: %v", err)
	}
	other()
	waiting, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.take(waiting, "alice"); !errors.Is(err, context.Canceled) {
		t.Fatalf("alice's second listing, given up while her first runs: %v, want its context's error", err)
	}
	next := make(chan error, 1)
	go func() {
		d, err := l.take(ctx, "alice")
		if err == nil {
			d()
		}
		next <- err
	}()
	done()
	if err := <-next; err != nil {
		t.Fatalf("alice's next listing once the first ended: %v", err)
	}
}
