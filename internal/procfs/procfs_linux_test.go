//go:build linux

package procfs_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

func TestChildGroupAndZombie(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !slices.Contains(procfs.Children(os.Getpid()), pid) {
		t.Fatalf("the child %d is not among Children %v", pid, procfs.Children(os.Getpid()))
	}
	if !procfs.Alive(pid) || !procfs.GroupAlive(pid) {
		t.Fatal("a running child is not alive, or its group is not")
	}
	if args := procfs.Cmdline(pid); !slices.Equal(args, []string{"sleep", "30"}) {
		t.Fatalf("Cmdline = %q", args)
	}
	_ = cmd.Process.Kill()
	// Killed but not reaped: a zombie, which counts as gone.
	deadline := time.Now().Add(10 * time.Second)
	for procfs.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("a killed child still counts as alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p, ok := procfs.Stat(pid); !ok || !p.Zombie || p.PPID != os.Getpid() {
		t.Fatalf("Stat of the unreaped child = %+v, %v; want a zombie of this process", p, ok)
	}
	if procfs.GroupAlive(pid) || slices.Contains(procfs.Children(os.Getpid()), pid) {
		t.Fatal("a zombie counts as living")
	}
	_ = cmd.Wait()
	if _, ok := procfs.Stat(pid); ok {
		t.Fatal("a reaped process is still listed")
	}
}

// Stat's Nice is a thread's nice value: a thread given a nice one above
// its own (lowering one's priority needs no privilege, from any nice the
// test runs at) reads that value.
func TestStatNice(t *testing.T) {
	t.Parallel()
	done := make(chan error)
	go func() {
		// The thread is locked and never unlocked: it ends with the
		// goroutine, its nice with it.
		runtime.LockOSThread()
		tid := syscall.Gettid()
		p, ok := procfs.Stat(tid)
		if !ok {
			done <- fmt.Errorf("no stat for thread %d", tid)
			return
		}
		want := min(p.Nice+1, 19)
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, want); err != nil {
			done <- err
			return
		}
		if p, ok := procfs.Stat(tid); !ok || p.Nice != want {
			done <- fmt.Errorf("Stat Nice = %d (%v), want %d", p.Nice, ok, want)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Stat's CPU is the process's utime + stime: what getrusage says, less
// at most a tick of each for /proc's rounding down.
func TestStatCPU(t *testing.T) {
	t.Parallel()
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for x := 0; rusage() < 100*time.Millisecond; x++ {
		_ = x * x // busy
	}
	before := rusage()
	p, ok := procfs.Stat(os.Getpid())
	after := rusage()
	if !ok || p.CPU < before-20*time.Millisecond || p.CPU > after {
		t.Fatalf("Stat CPU = %v, %v; getrusage said %v before and %v after", p.CPU, ok, before, after)
	}
}
