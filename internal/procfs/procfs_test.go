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

// Stat's Nice is the process's nice value: a thread given nice 7 (which
// needs no privilege) reads 7.
func TestStatNice(t *testing.T) {
	t.Parallel()
	done := make(chan error)
	go func() {
		// The thread is locked and never unlocked: it ends with the
		// goroutine, its nice with it.
		runtime.LockOSThread()
		tid := syscall.Gettid()
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, 7); err != nil {
			done <- err
			return
		}
		if p, ok := procfs.Stat(tid); !ok || p.Nice != 7 {
			done <- fmt.Errorf("Stat Nice = %d (%v), want 7", p.Nice, ok)
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
