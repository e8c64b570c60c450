package agent

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// The agents this process started and has not reaped. startMu is held
// (shared) from before an agent starts until its pid is in children, and
// (exclusively) by the orphan reaper while it looks at exited children, so
// that the reaper never takes an agent's exit for an orphan's: the agent's
// own Wait must have it.
var (
	startMu  sync.RWMutex
	childMu  sync.Mutex
	children = map[int]*exec.Cmd{}
)

// startChild starts cmd, its pid among children until forgetChild.
func startChild(cmd *exec.Cmd) error {
	startMu.RLock()
	defer startMu.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	childMu.Lock()
	children[cmd.Process.Pid] = cmd
	childMu.Unlock()
	return nil
}

// forgetChild is called once cmd, started by startChild, is reaped. (Its
// pid may be another agent's by then.)
func forgetChild(cmd *exec.Cmd) {
	childMu.Lock()
	if children[cmd.Process.Pid] == cmd {
		delete(children, cmd.Process.Pid)
	}
	childMu.Unlock()
}

// ReapOrphans reaps, until ctx ends, the exited children of this process
// that it did not start as agents. When the gateway is a container's PID 1
// (the image runs it so, with no init), the processes an agent started
// become its children when the agent's process group is killed (the agent
// dies first, or they outlive it), and each would stay a zombie, holding
// its PID, until reaped. Run it only where every other child of the
// process is started by startChild: it reaps any child that is not.
func ReapOrphans(ctx context.Context, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	// SIGCHLDs coalesce, and an agent's exit not yet reaped hides the
	// children behind it: look again now and then.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if n := reapOrphans(); n > 0 {
			log.Debug("reaped orphaned processes", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-tick.C:
		}
	}
}
