package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// fakeGroup records what the agent asks of its Group.
type fakeGroup struct {
	mu sync.Mutex
	// placedCmdline is the placed process's command line when Place ran.
	placedCmdline string
	placeErr      error
	oom           bool
	killed        int
	closed        int
}

func (g *fakeGroup) Place(pid int) error {
	cmdline := cmdlineOf(pid)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.placedCmdline = cmdline
	return g.placeErr
}

// cmdlineOf returns process pid's command line, its arguments joined by
// spaces.
func cmdlineOf(pid int) string {
	// Read it until it is there: under load, a process just started may
	// show an empty command line for a moment.
	var b []byte
	for deadline := time.Now().Add(2 * time.Second); len(b) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, _ = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

func (g *fakeGroup) Kill() { g.mu.Lock(); g.killed++; g.mu.Unlock() }

func (g *fakeGroup) OOMKilled() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.oom }

func (g *fakeGroup) Close() { g.mu.Lock(); g.closed++; g.mu.Unlock() }

func startInGroup(t *testing.T, g Group, s agentsim.Script) (*Agent, error) {
	t.Helper()
	cmd, err := agentsim.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	return Start(context.Background(), Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{}, Group: g,
		StartTimeout: 10 * time.Second, StopGrace: 200 * time.Millisecond})
}

// TestAgentIsPlacedBeforeItRuns: the process is placed while it is still
// the waiting shell, not yet the agent, and the agent owns its Group.
func TestAgentIsPlacedBeforeItRuns(t *testing.T) {
	t.Parallel()
	g := &fakeGroup{}
	a, err := startInGroup(t, g, agentsim.Script{})
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	placed := g.placedCmdline
	g.mu.Unlock()
	if !strings.HasPrefix(placed, "/bin/sh -c "+fmt.Sprintf(holdScript, 3)) {
		t.Errorf("placed %q, want the waiting shell", placed)
	}
	a.Close()
	if g.closed != 1 {
		t.Errorf("the group was closed %d times, want 1", g.closed)
	}
}

// Not parallel: it counts this process's children, which the parallel
// tests' agents would add to (they run only once the sequential ones are
// done).
func TestAgentThatCannotBePlacedDoesNotRun(t *testing.T) {
	g := &fakeGroup{placeErr: errors.New("no room")}
	before := childProcessCount()
	_, err := startInGroup(t, g, agentsim.Script{})
	if err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("Start: %v", err)
	}
	if g.closed != 1 {
		t.Errorf("the group was closed %d times, want 1", g.closed)
	}
	if n := childProcessCount(); n > before {
		t.Errorf("%d child processes left, %d before", n, before)
	}
}

// childProcessCount counts this process's living children.
func childProcessCount() int { return len(procfs.Children(os.Getpid())) }

func TestAgentKilledForMemorySaysOOM(t *testing.T) {
	t.Parallel()
	g := &fakeGroup{oom: true}
	status := 137
	a, err := startInGroup(t, g, agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Exit: &status}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sid, err := a.NewSession(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = a.Prompt(context.Background(), sid, nil, nil)
	<-a.Done()
	if a.Reason() != ReasonOOM || !strings.Contains(a.Err().Error(), "out of memory") {
		t.Errorf("reason %q, err %v", a.Reason(), a.Err())
	}
}
