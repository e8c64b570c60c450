//go:build linux

package procfs

import (
	"os"
	"strconv"
	"strings"
)

// List returns the processes of this machine this user may see.
func List() []Process {
	var out []Process
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := Stat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// Stat reads process pid, and reports whether it exists.
func Stat(pid int) (Process, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Process{}, false
	}
	return ParseStat(pid, stat)
}

// Cmdline returns the arguments of process pid, or nil.
func Cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
