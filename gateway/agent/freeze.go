package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// A gateway that may have lost a session to another replica must not let
// the session's agent act meanwhile, nor end it while it may still own
// the session: Freeze stops the agent's processes (and the reading of its
// output) until Thaw, and Kill ends them at once.
//
// With a [Freezer] Group the group freezes (cgroup v2's freezer: every
// process of the group, invisibly to them). Otherwise the processes get
// SIGSTOP, then SIGCONT: the agent's process group, and every process
// descended from the agent, so that those in a session of their own get
// it too (bubblewrap's --new-session puts the sandboxed command and its
// PID namespace in one). A process that left both, by a double fork and
// setsid, is reached only through a Group.

// Freeze stops the agent's processes until Thaw: once it returns they
// run nothing of their own (a system call under way completes). The read
// loop reads no more of the agent's output meanwhile: what it had read is
// handed on, and the rest waits in the pipe. Freezing a frozen agent does
// nothing. On error (the processes could not be signalled) the agent is
// frozen as far as it could be: Kill it.
func (a *Agent) Freeze() error {
	a.freezeMu.Lock()
	defer a.freezeMu.Unlock()
	if a.frozen.Load() {
		return nil
	}
	a.thawed = make(chan struct{})
	a.frozen.Store(true)
	a.byGroup = false
	// A read under way returns, and the next ones wait (holdingReader).
	_ = a.out.SetReadDeadline(time.Now())
	if f, ok := a.cfg.Group.(Freezer); ok {
		if f.Freeze() == nil {
			a.byGroup = true
			return nil
		}
		// A freeze that failed may have frozen the group all the same (a
		// cgroup that did not reach frozen in time): undone, or the
		// signals' Thaw would leave the agent stopped for good.
		_ = f.Thaw()
	}
	if err := a.signalAll(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("agent: freezing: %w", err)
	}
	return nil
}

// Thaw lets a frozen agent run again, and its output be read. On error
// the agent stays frozen.
func (a *Agent) Thaw() error {
	a.freezeMu.Lock()
	defer a.freezeMu.Unlock()
	if !a.frozen.Load() {
		return nil
	}
	var err error
	if a.byGroup {
		err = a.cfg.Group.(Freezer).Thaw()
	} else {
		err = a.signalAll(syscall.SIGCONT)
	}
	if err != nil {
		return fmt.Errorf("agent: thawing: %w", err)
	}
	_ = a.out.SetReadDeadline(time.Time{})
	a.frozen.Store(false)
	close(a.thawed)
	a.thawed = nil
	return nil
}

// Frozen reports whether the agent is frozen.
func (a *Agent) Frozen() bool { return a.frozen.Load() }

// Kill ends the agent's processes at once with SIGKILL, frozen or not,
// without the gentler steps of Close; Close is still to be called, to
// release what the agent holds.
func (a *Agent) Kill() {
	a.freezeMu.Lock()
	defer a.freezeMu.Unlock()
	_ = a.signalAll(syscall.SIGKILL)
	if a.cfg.Group != nil {
		a.cfg.Group.Kill()
	}
}

// gate holds the read loop, before it handles a line, while the agent is
// frozen: it runs the Fence first, which may freeze it.
func (a *Agent) gate() {
	if a.cfg.Fence != nil {
		a.cfg.Fence(a)
	}
	a.hold()
}

// hold waits while the agent is frozen, until it is thawed or has ended,
// and reports whether it ended frozen.
func (a *Agent) hold() bool {
	if !a.frozen.Load() {
		return false
	}
	a.freezeMu.Lock()
	thawed := a.thawed
	a.freezeMu.Unlock()
	if thawed == nil {
		return false
	}
	select {
	case <-thawed:
		return false
	case <-a.ended.Done():
		return true
	}
}

// holdingReader reads the agent's output, waiting while the agent is
// frozen: Freeze cuts a read under way short (its deadline), so that
// nothing more is read from the pipe once it returns.
type holdingReader struct{ a *Agent }

func (r holdingReader) Read(p []byte) (int, error) {
	for {
		n, err := r.a.out.Read(p)
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if r.a.hold() {
			return 0, io.EOF // killed frozen: what it left is not read
		}
	}
}

// signalAll sends sig to the agent's processes: its process group, and
// the processes descended from it. Once the agent is reaped its pid may
// be another's: then only its process group, which Close signals too.
func (a *Agent) signalAll(sig syscall.Signal) error {
	pid := a.cmd.Process.Pid
	select {
	case <-a.exited:
		if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	default:
	}
	return signalTree(pid, sig)
}

// maxTreePasses bounds the looks signalTree takes at the process tree.
const maxTreePasses = 50

// signalTree sends sig to every process descended from process root and
// to process group root, and again to those that appear meanwhile, until
// a look at the processes finds none that has not had it: a process that
// has a SIGSTOP pending forks no more, so the tree stops growing.
func signalTree(root int, sig syscall.Signal) error {
	sent := map[int]bool{}
	for pass := range maxTreePasses {
		children := map[int][]int{}
		for _, p := range procfs.List() {
			if !p.Zombie {
				children[p.PPID] = append(children[p.PPID], p.PID)
			}
		}
		fresh := false
		for stack := []int{root}; len(stack) > 0; {
			p := stack[len(stack)-1]
			stack = append(stack[:len(stack)-1], children[p]...)
			if !sent[p] {
				sent[p], fresh = true, true
				_ = syscall.Kill(p, sig)
			}
		}
		if pass == 0 {
			// After the tree is known: a SIGKILL would have the agent's
			// children handed to another parent before they were found.
			if err := syscall.Kill(-root, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
		if !fresh {
			return nil
		}
	}
	return fmt.Errorf("the agent's process tree kept growing past %d looks", maxTreePasses)
}
