// Package limits bounds each agent's whole process tree: its memory, its
// number of processes and its CPU with a control group of its own (cgroup
// v2, or the v1 hierarchies where that is what the host has), and its open
// files and file size with resource limits, which cgroups do not cover.
//
// It works without root, from a cgroup subtree delegated to the gateway's
// user (systemd's Delegate=yes, or a container's own writable cgroup):
// every agent's group is made below the gateway's own, in a directory of
// the gateway's, which the next gateway to start empties, with every
// process in it, should the gateway die.
//
// Every limit needs Linux: off Linux (darwin) [Setup] refuses any limit,
// with an error wrapping [ErrUnsupported], and groups hold nothing.
package limits

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits for one agent's process tree. A zero field is no limit.
type Limits struct {
	// Memory is the most memory, in bytes, the tree may use; past it the
	// kernel kills it, and the gateway ends the agent with reason oom.
	Memory int64
	// Pids is the most processes (and threads) the tree may have at once.
	Pids int64
	// CPU is the most CPU time the tree may use, in CPUs (1.5: one and a
	// half CPUs' worth in every period).
	CPU float64
	// NoFile is the most files each process may hold open (RLIMIT_NOFILE).
	NoFile uint64
	// FileSize is the largest file, in bytes, a process may write
	// (RLIMIT_FSIZE).
	FileSize uint64
}

// Defaults that a real agent such as Claude Code, with the tools it runs,
// works within.
var Defaults = Limits{Memory: 4 << 30, Pids: 1024, CPU: 1, NoFile: 4096, FileSize: 4 << 30}

// String says what l enforces.
func (l Limits) String() string {
	var parts []string
	if l.Memory > 0 {
		parts = append(parts, "memory "+bytesString(l.Memory))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("%d processes", l.Pids))
	}
	if l.CPU > 0 {
		parts = append(parts, strconv.FormatFloat(l.CPU, 'g', -1, 64)+" CPU")
	}
	if l.NoFile > 0 {
		parts = append(parts, fmt.Sprintf("%d open files", l.NoFile))
	}
	if l.FileSize > 0 {
		parts = append(parts, "files up to "+bytesString(int64(l.FileSize)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ErrCgroup is wrapped by the error of a host where no cgroup of the
// gateway's may be made.
var ErrCgroup = errors.New("per-agent limits need a cgroup the gateway may write")

// Reaped is a directory of agents' groups that a gateway that is gone
// left with processes in it, which Setup killed.
type Reaped struct {
	// Group is the directory, in the primary hierarchy.
	Group string
	// Killed counts the processes killed.
	Killed int
	// Err says what was left: processes that could not be killed (of
	// another user, or of a PID namespace this gateway does not see), or
	// groups that could not be removed.
	Err error
}

// ErrUnsupported is wrapped by the error of [Setup] on a platform that
// cannot enforce a limit asked for: every limit needs Linux (cgroups for
// memory, processes and CPU; prlimit(2) for open files and file size), so
// on darwin only the zero Limits can be set up.
var ErrUnsupported = errors.New("per-agent limits need Linux")

// ErrNoFreezer is returned by Freeze and Thaw of a group without a
// cgroup (one for resource limits alone): the caller stops the processes
// some other way.
var ErrNoFreezer = errors.New("limits: the group has no cgroup to freeze")

// Resources lists the limits l sets, by resource name (memory_bytes, pids,
// cpu, open_files, file_size_bytes), for the acp_gateway_agent_limit metric.
func (l Limits) Resources() map[string]float64 {
	r := map[string]float64{}
	for name, v := range map[string]float64{
		"memory_bytes": float64(l.Memory), "pids": float64(l.Pids), "cpu": l.CPU,
		"open_files": float64(l.NoFile), "file_size_bytes": float64(l.FileSize),
	} {
		if v > 0 {
			r[name] = v
		}
	}
	return r
}
