//go:build linux

package agent

import (
	"fmt"
	"os"
	"syscall"
)

// procAttr is how an agent's process starts: in a process group of its
// own, which Close ends, and dying with the gateway, even a SIGKILLed one
// (PR_SET_PDEATHSIG).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// fdPath names the directory that the descriptor of f refers to, wherever
// its path leads now.
func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// ownNice is the nice value of the calling thread, which on Linux is a
// thread's own: the gateway's threads share theirs.
func ownNice() (int, error) {
	// The system call answers 20 - nice (libc's getpriority undoes it).
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	return 20 - p, err
}
