package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// A caller of Agents that goes away while the agent is being asked does
// not fail the others that wait for the same answer: the probe is the
// gateway's, not the first caller's.
func TestAgentsProbeOutlivesItsFirstCaller(t *testing.T) {
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 2,
		Startup: []agentsim.Step{{Sleep: agentsim.Duration(300 * time.Millisecond)}}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{Store: statestore.NewMemory(statestore.Options{}), IdleTimeout: -1,
		Agents: map[string][]string{"slow": cmd}})
	defer m.Close()

	first, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Agents(first, "mallory")
		done <- err
	}()
	// The second caller waits for the probe the first started.
	for {
		m.profiles.mu.Lock()
		asking := m.profiles.byName["slow"] != nil
		m.profiles.mu.Unlock()
		if asking {
			break
		}
		time.Sleep(time.Millisecond)
	}
	second := make(chan []AgentProfile, 1)
	go func() {
		list, err := m.Agents(context.Background(), "alice")
		if err != nil {
			t.Errorf("the second caller: %v", err)
		}
		second <- list
	}()
	time.Sleep(50 * time.Millisecond) // the second caller waits on the probe
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled caller got no error")
	}
	list := <-second
	if len(list) != 1 || list[0].Err != nil || list[0].Profile.Version != 2 {
		t.Fatalf("the second caller, whose context was not cancelled, got %+v", list)
	}
}

// The agent ListAgents asks runs, without a sandbox too, in an empty HOME
// of its own, not the HOME every user's agent shares: what it says is
// shown to every user.
func TestAgentsProbeRunsInAnEmptyHome(t *testing.T) {
	seen := filepath.Join(t.TempDir(), "home")
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 1,
		Startup: []agentsim.Step{{Shell: `{ echo "$HOME"; ls -A "$HOME"; } > ` + seen}}})
	if err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, ".credentials"), []byte("alice's"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{Store: statestore.NewMemory(statestore.Options{}), IdleTimeout: -1,
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + shared}, Agents: map[string][]string{"sim": cmd}})
	defer m.Close()
	list, err := m.Agents(context.Background(), "")
	if err != nil || len(list) != 1 || list[0].Err != nil {
		t.Fatalf("Agents: %+v, %v", list, err)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || lines[0] == shared || lines[0] == "" {
		t.Errorf("the probe's HOME and what it held: %q, want an empty directory other than %s", lines, shared)
	}
}
