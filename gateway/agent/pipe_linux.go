//go:build linux

package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeBytes is the capacity asked for the pipe of an agent's output:
// Linux's largest for an unprivileged process by default
// (/proc/sys/fs/pipe-max-size).
const pipeBytes = 1 << 20

// growPipe makes the pipe of f hold pipeBytes instead of 64 KiB. The
// gateway reads an agent's output through Go's network poller, and when
// every CPU is busy with runnable goroutines (a thousand watchers, say)
// the poller may be looked at only every 10 ms: a 64 KiB pipe then held
// an agent to 6.4 MB a second, about 9,000 of the bench's updates. The
// kernel gives the pipe pages as they fill, so an idle agent's pipe costs
// no more. Where the capacity cannot be changed, the pipe stays as it is.
// (SyscallConn, not Fd: Fd would take the descriptor out of the poller.)
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes)
	})
}
