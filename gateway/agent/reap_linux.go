//go:build linux

package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once process pid, a child of this process not yet
// reaped, has exited, so that reaping it does not block. It waits in Go's
// network poller on a pidfd (Linux 5.3 and later) rather than in a
// waitid(2) system call: a goroutine blocked in a system call holds an OS
// thread, with its own stacks, for as long as the agent runs, which was
// the largest part of an idle session's memory. Where no pidfd can be had
// it returns at once, and the caller's Wait blocks as before.
func awaitExit(pid int) {
	// The child is not reaped before this returns, so pid cannot have
	// been reused by another process.
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	// os.NewFile registers a non-blocking descriptor with the poller. A
	// pidfd becomes readable when the process exits.
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		ready, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		// On an error, stop waiting here: Wait blocks instead.
		return err != unix.EINTR && (err != nil || ready > 0)
	})
}
