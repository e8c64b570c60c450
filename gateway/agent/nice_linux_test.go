package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// forkingScript is an agent whose turn starts a child, sleep, that
// outlives the turn, and writes its pid to the file pidFile.
func forkingScript(pidFile string) agentsim.Script {
	return agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Shell: "sleep 600 </dev/null >/dev/null 2>&1 & echo $! > " + pidFile},
	}}}}
}

// startForking starts forkingScript's agent with nice and, when group,
// a Group; runs its turn; and returns the agent and its child's pid.
func startForking(t *testing.T, nice int, group bool) (*Agent, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cmd, err := agentsim.Command(forkingScript(pidFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{}, Nice: nice,
		StartTimeout: 10 * time.Second, StopGrace: 200 * time.Millisecond}
	if group {
		cfg.Group = &fakeGroup{}
	}
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	ctx := context.Background()
	sid, err := a.NewSession(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Prompt(ctx, sid, nil, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return a, child
}

// threadNices returns the nice values of the threads of process pid.
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var nices []int
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if p, ok := procfs.Stat(tid); ok {
			nices = append(nices, p.Nice)
		}
	}
	if len(nices) == 0 {
		t.Fatalf("process %d has no threads", pid)
	}
	return nices
}

// An agent started with Nice runs, every thread of it, and so does what it
// forks once it runs, at the gateway's nice value plus Nice; with Nice 0,
// at the gateway's. Both where the agent starts at once and where it
// waits to be placed in a Group.
func TestAgentRunsAtItsNice(t *testing.T) {
	t.Parallel()
	own, err := ownNice()
	if err != nil {
		t.Fatal(err)
	}
	if own >= MaxNice {
		t.Fatalf("the test runs at nice %d: no lower priority is left to give its agents", own)
	}
	for _, tc := range []struct {
		name  string
		nice  int
		group bool
		want  int
	}{
		{"default", DefaultNice, false, min(own+DefaultNice, MaxNice)},
		{"default in a group", DefaultNice, true, min(own+DefaultNice, MaxNice)},
		{"past the lowest", MaxNice, false, MaxNice},
		{"zero", 0, false, own},
		{"zero in a group", 0, true, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, child := startForking(t, tc.nice, tc.group)
			for _, n := range threadNices(t, a.cmd.Process.Pid) {
				if n != tc.want {
					t.Errorf("an agent thread has nice %d, want %d", n, tc.want)
				}
			}
			if p, ok := procfs.Stat(child); !ok || p.Nice != tc.want {
				t.Errorf("the agent's child: nice %d (listed %v), want %d", p.Nice, ok, tc.want)
			}
		})
	}
}

// Not parallel: it replaces setPriority, and counts this process's
// children. An agent whose priority cannot be lowered does not run, and
// Start says why.
func TestAgentWhosePriorityCannotBeLoweredDoesNotRun(t *testing.T) {
	defer func(f func(int, int, int) error) { setPriority = f }(setPriority)
	setPriority = func(int, int, int) error { return syscall.EPERM }
	for _, group := range []bool{false, true} {
		before := childProcessCount()
		cmd, err := agentsim.Command(agentsim.Script{})
		if err != nil {
			t.Fatal(err)
		}
		g := &fakeGroup{}
		cfg := Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{}, Nice: DefaultNice, StartTimeout: 10 * time.Second}
		if group {
			cfg.Group = g
		}
		_, err = Start(context.Background(), cfg)
		if err == nil || !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "lowering its CPU priority") {
			t.Fatalf("group %v: Start: %v, want its priority's error", group, err)
		}
		if group && g.closed != 1 {
			t.Errorf("the group was closed %d times, want 1", g.closed)
		}
		if n := childProcessCount(); n > before {
			t.Errorf("group %v: %d child processes left, %d before", group, n, before)
		}
	}
}

// Not parallel: it replaces setPriority. An agent without a Group is
// still the waiting shell when its priority is lowered, as one with a
// Group is when it is placed: nothing of its own has run, so nothing it
// started can have left its process group at the gateway's priority.
func TestAgentIsLoweredBeforeItRuns(t *testing.T) {
	defer func(f func(int, int, int) error) { setPriority = f }(setPriority)
	var lowered string
	setPriority = func(which, who, prio int) error {
		lowered = cmdlineOf(who)
		return syscall.Setpriority(which, who, prio)
	}
	cmd, err := agentsim.Command(agentsim.Script{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Start(context.Background(), Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{}, Nice: DefaultNice, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if !strings.HasPrefix(lowered, "/bin/sh -c "+fmt.Sprintf(holdScript, 3)) {
		t.Errorf("lowered %q, want the waiting shell", lowered)
	}
}

// BenchmarkStartNice starts and closes an agent without a Group, at the
// gateway's priority (0: no waiting shell) and at DefaultNice (the agent
// waits as a shell until its priority is lowered).
func BenchmarkStartNice(b *testing.B) {
	cmd, err := agentsim.Command(agentsim.Script{})
	if err != nil {
		b.Fatal(err)
	}
	for _, nice := range []int{0, DefaultNice} {
		b.Run(strconv.Itoa(nice), func(b *testing.B) {
			for b.Loop() {
				a, err := Start(context.Background(), Config{Command: cmd, Dir: b.TempDir(), Client: &recorder{}, Nice: nice, StartTimeout: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				a.Close()
			}
		})
	}
}
