package testutil

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// Stopped reports whether process pid runs nothing more of its own: it is
// stopped (SIGSTOP), gone or a zombie, or has a SIGSTOP pending, which it
// takes before it runs anything (a shell waiting in vfork for a child
// stopped before it ran its program sleeps uninterruptibly so). A process
// a cgroup v2 freezer holds is none of these: read the group's
// cgroup.events.
func Stopped(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return StoppedIn(string(stat), string(status))
}

// StoppedIn is Stopped of a process whose /proc/PID/stat and
// /proc/PID/status read stat and status; an empty stat is a process that
// is gone.
func StoppedIn(stat, status string) bool {
	p, ok := procfs.ParseStat(0, []byte(stat))
	if !ok || p.State == 'T' || p.State == 'Z' || p.State == 'X' {
		return true
	}
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGSTOP-1)) != 0
		}
	}
	return false
}
