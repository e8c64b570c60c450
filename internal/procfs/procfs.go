// Package procfs reads processes from Linux's /proc (on darwin, from the
// kern.proc sysctls): the agent package finds what an agent left in its
// process group with it, and the tests and the bench check with it that no
// process outlives its work.
//
// A zombie (exited, not yet reaped) counts as not living: it runs nothing
// and holds nothing but its process table entry.
package procfs

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// Process is what /proc/PID/stat says of a process.
type Process struct {
	PID, PPID, PGID int
	// State is the state letter: R running, S sleeping, T stopped, Z
	// zombie, and the others proc(5) lists.
	State  byte
	Zombie bool
	// CPU is the process's user and system time (utime + stime, in 10 ms
	// ticks), its children's not included.
	CPU time.Duration
	// Nice is its nice value (of its main thread; Stat of a thread id
	// gives the thread's).
	Nice int
}

// ParseStat reads the contents of process pid's /proc/PID/stat, read
// before (a snapshot, say), and reports whether they are whole.
func ParseStat(pid int, stat []byte) (Process, bool) {
	// pid (comm) state ppid pgrp ... utime stime ... nice ...: comm may
	// hold spaces and parentheses; utime and stime are fields 14 and 15,
	// the 12th and 13th after it, nice field 19, the 17th.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Process{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 17 {
		return Process{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	nice, _ := strconv.Atoi(f[16])
	return Process{PID: pid, PPID: ppid, PGID: pgid, State: f[0][0], Zombie: f[0] == "Z", CPU: time.Duration(ut+st) * clockTick, Nice: nice}, true
}

// Alive reports whether pid is a living process.
func Alive(pid int) bool {
	p, ok := Stat(pid)
	return ok && !p.Zombie
}

// Children lists the living children of process parent.
func Children(parent int) []int {
	var out []int
	for _, p := range List() {
		if p.PPID == parent && !p.Zombie {
			out = append(out, p.PID)
		}
	}
	return out
}

// GroupAlive reports whether a living process is in process group pgid.
func GroupAlive(pgid int) bool {
	for _, p := range List() {
		if p.PGID == pgid && !p.Zombie {
			return true
		}
	}
	return false
}
