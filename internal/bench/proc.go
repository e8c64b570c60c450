package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// procCPU returns the CPU time process pid has used: the sum over its
// threads of /proc/PID/task/TID/schedstat (nanoseconds on a CPU), or when
// that is not available utime + stime of /proc/PID/stat (10 ms ticks).
// Its children are never included.
func procCPU(pid int) (time.Duration, error) {
	if run, _, err := schedstat(pid); err == nil {
		return run, nil
	}
	p, ok := procfs.Stat(pid)
	if !ok {
		return 0, fmt.Errorf("bench: no process %d", pid)
	}
	return p.CPU, nil
}

// descendantsCPU returns the CPU time, by pid, of the processes below
// process pid (its children, theirs, ...), by procCPU: for the CPU its
// agents used over a span, sample it at both ends and count the processes
// alive at both (cpuOver).
func descendantsCPU(pid int) map[int]time.Duration {
	below := map[int]bool{pid: true}
	procs := procfs.List()
	// Parents come before their children in no particular order: walk
	// until no process is added.
	for added := true; added; {
		added = false
		for _, p := range procs {
			if !below[p.PID] && below[p.PPID] {
				below[p.PID], added = true, true
			}
		}
	}
	out := make(map[int]time.Duration, len(below))
	for q := range below {
		if q == pid {
			continue
		}
		if cpu, err := procCPU(q); err == nil {
			out[q] = cpu
		}
	}
	return out
}

// cpuOver is the CPU time the processes sampled at both from and to used
// between the samples.
func cpuOver(from, to map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range to {
		if f, ok := from[pid]; ok && t > f {
			d += t - f
		}
	}
	return d
}

// schedstat sums over process pid's living threads the first two fields of
// /proc/PID/task/TID/schedstat: the time they ran on a CPU, and the time
// they were runnable but waited for one. (A Go process's threads live as
// long as it does, so its sum misses none.)
func schedstat(pid int) (run, wait time.Duration, err error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, errors.New("bench: short schedstat")
		}
		r, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		w, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		run += time.Duration(r)
		wait += time.Duration(w)
	}
	return run, wait, nil
}

// procStatus returns a kB field of /proc/PID/status (VmHWM, VmRSS) in bytes.
func procStatus(pid int, field string) (int64, error) {
	return kBField("/proc/"+strconv.Itoa(pid)+"/status", field)
}

// kBField returns, in bytes, field of a /proc file of "Field: N kB"
// lines (/proc/PID/status, /proc/meminfo).
func kBField(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("bench: no %s in %s", field, path)
}

// resetPeakRSS resets process pid's VmHWM to its current RSS, so that the
// next reading is the peak of what follows.
func resetPeakRSS(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// selfCPU returns this process's CPU time from getrusage.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runProcesses lists the living processes whose command line carries the
// bench run id runID: the agents, readers and gateways of one run.
func runProcesses(runID string) []int {
	var out []int
	for _, p := range procfs.List() {
		if p.Zombie || p.PID == os.Getpid() {
			continue
		}
		cmdline := procfs.Cmdline(p.PID)
		for i, a := range cmdline {
			if a == "--run" && i+1 < len(cmdline) && cmdline[i+1] == runID {
				out = append(out, p.PID)
				break
			}
		}
	}
	return out
}

// child is a running child process of the bench: this executable in one
// of its child modes, its stdin a pipe, its stdout read line by line, its
// stderr kept.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer
	// group: the child leads a process group of its own, which kill
	// ends whole.
	group bool
}

// startChild starts self in child mode with runID and args; group puts
// it in a process group of its own.
func startChild(self []string, mode, runID string, group bool, args ...string) (*child, error) {
	argv := append(append(append([]string{}, self[1:]...), mode, "--run", runID), args...)
	cmd := exec.Command(self[0], argv...)
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), stderr: &lockedBuffer{}, group: group}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// kill ends the child (its process group, with group) and reaps it.
func (c *child) kill() {
	if c.group {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	} else {
		_ = c.cmd.Process.Kill()
	}
	_ = c.cmd.Wait()
}

// result reads the child's last word, a line of JSON, into v, waiting at
// most d (or until ctx ends, when it kills the child), and reaps it. name
// names the child in errors.
func (c *child) result(ctx context.Context, d time.Duration, name string, v any) error {
	line, err := lineWithin(ctx, c.out, d)
	if err != nil && line == "" {
		c.kill()
		return fmt.Errorf("%s: %v %s", name, err, strings.TrimSpace(c.stderr.String()))
	}
	waitErr := c.cmd.Wait()
	if err := json.Unmarshal([]byte(line), v); err != nil {
		return fmt.Errorf("%s: %v (exit: %v) %s", name, err, waitErr, strings.TrimSpace(c.stderr.String()))
	}
	return nil
}
