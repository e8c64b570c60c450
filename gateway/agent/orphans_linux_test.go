//go:build linux

package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// orphanHelper names the environment variable that makes this test binary
// the orphan test's child process.
const orphanHelper = "ACP_GATEWAY_ORPHAN_HELPER"

// The reaper reaps what an agent leaves behind when the gateway is where
// orphans go (a container's PID 1; here a child subreaper, which the
// kernel treats the same way), and never an agent's own exit, which its
// Wait must get. It runs in a process of its own: in the test process it
// would reap the other tests' children.
func TestOrphansAreReaped(t *testing.T) {
	if os.Getenv(orphanHelper) == "1" {
		orphanHelperMain(t)
		return
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOrphansAreReaped$", "-test.v")
	cmd.Env = append(os.Environ(), orphanHelper+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "orphans reaped") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// orphanHelperMain is the helper process's test: it fails the process (as
// a test failure) on any error.
func orphanHelperMain(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ReapOrphans(ctx, slog.New(slog.DiscardHandler))

	// An "agent" that leaves a process behind, which exits later.
	agent := exec.Command("sh", "-c", `sh -c 'sleep 0.3; exit 3' & echo $!; exit 7`)
	stdout, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := startChild(agent); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	waitAgent(t, agent, 7)

	// Agents exiting all the while are still reaped by their own Wait.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			c := exec.Command("sh", "-c", fmt.Sprintf("exit %d", 10+i))
			if err := startChild(c); err != nil {
				t.Error(err)
				return
			}
			waitAgent(t, c, 10+i)
		})
	}
	wg.Wait()

	// The orphan, now this process's child, exits and is reaped: its
	// /proc entry goes (a zombie keeps it, in state Z).
	testutil.WaitFor(t, fmt.Sprintf("orphan %d to be reaped", orphan), func() bool {
		_, ok := procfs.Stat(orphan)
		return !ok
	})
	fmt.Println("orphans reaped")
}

// waitAgent waits for c as the agent's own goroutine does, and checks it
// gets c's exit status.
func waitAgent(t *testing.T, c *exec.Cmd, code int) {
	t.Helper()
	err := c.Wait()
	forgetChild(c)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != code {
		t.Errorf("agent %d: Wait gave %v, want exit status %d", c.Process.Pid, err, code)
	}
}
