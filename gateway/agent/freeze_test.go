package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// tickingAgent starts agentsim's script s behind a shell that first starts
// a child in a session of its own (as a sandbox's command is), which
// appends a line to the returned file every 10 ms.
func tickingAgent(t *testing.T, s agentsim.Script, cfg Config) (*Agent, string) {
	t.Helper()
	cmd, err := agentsim.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	ticks := filepath.Join(t.TempDir(), "ticks")
	cfg.Command = append([]string{"/bin/sh", "-c",
		`setsid sh -c 'while :; do echo >> "$0"; sleep 0.01; done' "$0" & shift; exec "$@"`, ticks, "-"}, cmd...)
	cfg.Dir, cfg.StartTimeout, cfg.StopGrace = t.TempDir(), 20*time.Second, 200*time.Millisecond
	if cfg.Client == nil {
		cfg.Client = &recorder{}
	}
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Close ends the agent's process group; the child left it.
	t.Cleanup(func() { a.Kill(); a.Close() })
	testutil.WaitFor(t, "the child to tick", func() bool { return tickCount(ticks) > 0 })
	return a, ticks
}

func tickCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// tree lists the living processes descended from pid, pid among them.
func tree(pid int) []int {
	children := map[int][]int{}
	for _, p := range procfs.List() {
		if !p.Zombie {
			children[p.PPID] = append(children[p.PPID], p.PID)
		}
	}
	out := []int{}
	for stack := []int{pid}; len(stack) > 0; {
		p := stack[len(stack)-1]
		stack = append(stack[:len(stack)-1], children[p]...)
		if procfs.Alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// Without a Group, Freeze stops the agent and the processes it started,
// those in a session of their own included; Thaw lets them run on, the
// agent answering again; Kill ends them all, the child outside the
// agent's process group too.
func TestFreezeThawAndKillTheAgentsTree(t *testing.T) {
	t.Parallel()
	a, ticks := tickingAgent(t, agentsim.Script{ProtocolVersion: 1}, Config{})
	pid := a.cmd.Process.Pid
	procs := tree(pid)
	if len(procs) < 2 {
		t.Fatalf("the agent's tree is %v", procs)
	}
	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	if !a.Frozen() {
		t.Fatal("Frozen is false after Freeze")
	}
	for _, p := range procs {
		testutil.WaitFor(t, fmt.Sprintf("process %d to stop", p), func() bool { return testutil.Stopped(p) })
	}
	n := tickCount(ticks)
	if err := a.Thaw(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the child to tick again", func() bool { return tickCount(ticks) > n+2 })
	if _, err := a.NewSession(context.Background(), t.TempDir()); err != nil {
		t.Fatalf("the thawed agent: %v", err)
	}

	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	a.Kill()
	<-a.Done()
	testutil.WaitFor(t, "every process of the tree to end", func() bool {
		for _, p := range procs {
			if procfs.Alive(p) {
				return false
			}
		}
		return true
	})
}

// The Fence is called as soon as the agent's process runs: one that
// freezes it there holds the start-up until the agent is thawed. It is
// called again before each line of output.
func TestFenceRunsFromTheStart(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	frozen := make(chan *Agent, 1)
	fence := func(a *Agent) {
		if calls.Add(1) == 1 {
			if err := a.Freeze(); err != nil {
				t.Error(err)
			}
			frozen <- a
		}
	}
	go func() {
		a := <-frozen
		testutil.WaitFor(t, "the agent to stop", func() bool { return testutil.Stopped(a.cmd.Process.Pid) })
		if err := a.Thaw(); err != nil {
			t.Error(err)
		}
	}()
	a, _ := tickingAgent(t, agentsim.Script{ProtocolVersion: 1}, Config{Fence: fence})
	if _, err := a.NewSession(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 3 {
		t.Errorf("the Fence was called %d times, want once at the start and once a line", n)
	}
}

// fakeFreezer is a Group whose Freeze stops nothing: the agent runs on,
// and only the gateway's reading of it holds.
type fakeFreezer struct{ fakeGroup }

func (*fakeFreezer) Freeze() error { return nil }
func (*fakeFreezer) Thaw() error   { return nil }

// While an agent is frozen its output is not read: a prompt it answers
// (its process still running, here) is not seen answered until Thaw, and
// then nothing it sent is lost.
func TestFrozenAgentsOutputWaits(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	chunk := func(text string) agentsim.Step {
		return agentsim.Step{Update: json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}
	}
	a, _ := tickingAgent(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{chunk("one"), chunk("two")}}}},
		Config{Group: &fakeFreezer{}, Client: rec})
	sid, err := a.NewSession(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	prompt := []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "go"}}}}
	if _, err := a.Prompt(ctx, sid, prompt, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a prompt to the frozen agent: %v, want no answer read", err)
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("updates read from the frozen agent: %v", got)
	}
	if err := a.Thaw(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the held updates", func() bool { return len(rec.seen()) == 2 })
	if got := rec.seen(); !strings.HasSuffix(got[0], " one") || !strings.HasSuffix(got[1], " two") {
		t.Fatalf("updates %v after Thaw", got)
	}
}

// halfFreezer is a Group whose Freeze fails having frozen its group all
// the same (a cgroup that did not reach frozen in time).
type halfFreezer struct {
	fakeGroup
	frozen atomic.Bool
}

func (g *halfFreezer) Freeze() error {
	g.frozen.Store(true)
	return errors.New("the group's processes did not reach frozen in time")
}

func (g *halfFreezer) Thaw() error { g.frozen.Store(false); return nil }

// An agent whose Group failed to freeze is frozen with signals instead,
// and its Thaw leaves nothing frozen: not the group either, which would
// hold the agent stopped for good.
func TestThawAfterAFailedGroupFreezeLeavesTheGroupThawed(t *testing.T) {
	t.Parallel()
	g := &halfFreezer{}
	a, ticks := tickingAgent(t, agentsim.Script{ProtocolVersion: 1}, Config{Group: g})
	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	pid := a.cmd.Process.Pid
	testutil.WaitFor(t, "the agent to stop", func() bool { return testutil.Stopped(pid) })
	n := tickCount(ticks)
	if err := a.Thaw(); err != nil {
		t.Fatal(err)
	}
	if g.frozen.Load() {
		t.Fatal("the group is still frozen after Thaw")
	}
	testutil.WaitFor(t, "the child to tick again", func() bool { return tickCount(ticks) > n+2 })
}
