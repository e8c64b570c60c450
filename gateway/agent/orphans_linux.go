//go:build linux

package agent

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// isChild reports whether pid is an agent startChild started and
// forgetChild has not forgotten.
func isChild(pid int) bool {
	childMu.Lock()
	defer childMu.Unlock()
	_, ok := children[pid]
	return ok
}

// reapOrphans reaps the exited children that are not agents, up to the
// first exited agent, and returns how many it reaped.
func reapOrphans() int {
	startMu.Lock()
	defer startMu.Unlock()
	n := 0
	for {
		// Which child has exited, without reaping it (WNOWAIT).
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			return n // ECHILD: no children at all
		}
		pid := siginfoPid(&info)
		if pid == 0 || isChild(pid) {
			return n // none exited, or an agent, which its Wait reaps
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil || got != pid {
			return n
		}
		n++
	}
}

// siginfoPid returns si_pid of a siginfo_t that waitid(2) filled: the
// first member of the union that follows si_signo, si_errno and si_code,
// aligned as a pointer is. (x/sys/unix leaves the union unnamed.)
func siginfoPid(info *unix.Siginfo) int {
	off := (3*unsafe.Sizeof(int32(0)) + unsafe.Alignof(uintptr(0)) - 1) &^ (unsafe.Alignof(uintptr(0)) - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}
