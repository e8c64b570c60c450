// Package limits bounds each agent's whole process tree: its memory, its
// number of processes and its CPU with a control group of its own (cgroup
// v2, or the v1 hierarchies where that is what the host has), and its open
// files and file size with resource limits, which cgroups do not cover.
//
// It works without root, from a cgroup subtree delegated to the gateway's
// user (systemd's Delegate=yes, or a container's own writable cgroup):
// every agent's group is made below the gateway's own.
package limits

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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

// needsCgroup reports whether l sets a limit that only a cgroup enforces.
func (l Limits) needsCgroup() bool { return l.Memory > 0 || l.Pids > 0 || l.CPU > 0 }

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

// agentsDir is the group, below the gateway's own, that holds one group
// per agent.
const agentsDir = "acp-gateway-agents"

// cpuPeriod is the CFS period, in microseconds, of the CPU quota.
const cpuPeriod = 100000

// Controller makes a group for each agent. It is safe for concurrent use.
type Controller struct {
	limits Limits
	// v2 is the unified hierarchy's group that holds the agents' groups
	// (for example /system.slice/acp-gateway.service/acp-gateway-agents);
	// empty where the v1 hierarchies are used.
	v2 string
	// v1 lists the v1 controllers used; empty where v2 is.
	v1 []cgroup1.Name
}

// ErrCgroup is wrapped by the error of a host where no cgroup of the
// gateway's may be made.
var ErrCgroup = errors.New("per-agent limits need a cgroup the gateway may write")

// probes numbers the groups Setup makes, unique in the process.
var probes atomic.Int64

// Setup checks that l can be enforced here and returns the Controller that
// enforces it. Resource limits (open files, file size) need nothing; the
// others need a cgroup the gateway may make groups in: where there is
// none, the error (wrapping ErrCgroup) names the fix.
func Setup(l Limits) (*Controller, error) {
	c := &Controller{limits: l}
	if !l.needsCgroup() {
		return c, nil
	}
	var err error
	switch cgroups.Mode() {
	case cgroups.Unified:
		err = c.setupV2()
	case cgroups.Legacy, cgroups.Hybrid:
		err = c.setupV1()
	default:
		err = errors.New("no cgroup file system is mounted at /sys/fs/cgroup")
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%v): run the gateway with a cgroup subtree of its own (systemd: Delegate=yes; a container: a writable cgroup), or set --agent-memory, --agent-pids and --agent-cpu to 0 to run agents without them", ErrCgroup, err)
	}
	// A group made and removed proves the setup.
	g, err := c.New(fmt.Sprintf("probe-%d-%d", os.Getpid(), probes.Add(1)))
	if err != nil {
		return nil, fmt.Errorf("%w (%v): run the gateway with a cgroup subtree of its own (systemd: Delegate=yes; a container: a writable cgroup), or set --agent-memory, --agent-pids and --agent-cpu to 0 to run agents without them", ErrCgroup, err)
	}
	g.Close()
	return c, nil
}

// Limits returns what the Controller enforces.
func (c *Controller) Limits() Limits { return c.limits }

// Describe says what is enforced and how, for the start-up log.
func (c *Controller) Describe() string {
	switch {
	case !c.limits.needsCgroup():
		return c.limits.String() + " (resource limits)"
	case c.v2 != "":
		return c.limits.String() + " (cgroup v2 " + c.v2 + ")"
	}
	names := make([]string, len(c.v1))
	for i, n := range c.v1 {
		names[i] = string(n)
	}
	return c.limits.String() + " (cgroup v1 " + strings.Join(names, ",") + ")"
}

// setupV1 picks the v1 controllers the limits need. The pids controller is
// always used: it lists the group's processes, to end them all.
func (c *Controller) setupV1() error {
	c.v1 = []cgroup1.Name{cgroup1.Pids}
	if c.limits.Memory > 0 {
		c.v1 = append(c.v1, cgroup1.Memory)
	}
	if c.limits.CPU > 0 {
		c.v1 = append(c.v1, cgroup1.Cpu)
	}
	return nil
}

// setupV2 finds the gateway's own group, and moves the gateway into a leaf
// of it where it must, so that the memory, pids and cpu controllers can be
// enabled for the groups beside it ("no internal processes").
func (c *Controller) setupV2() error {
	own, err := cgroup2.NestedGroupPath("")
	if err != nil {
		return err
	}
	const mount = "/sys/fs/cgroup"
	want := "+memory +pids +cpu"
	ctl := filepath.Join(mount, own, "cgroup.subtree_control")
	if err := os.WriteFile(ctl, []byte(want), 0); errors.Is(err, syscall.EBUSY) {
		leaf := filepath.Join(mount, own, "gateway")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("moving the gateway into %s: %w", leaf, err)
		}
		if err := os.WriteFile(ctl, []byte(want), 0); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	c.v2 = filepath.Join(own, agentsDir)
	return nil
}

// Group is one agent's group.
type Group struct {
	limits Limits
	v1     cgroup1.Cgroup
	v2     *cgroup2.Manager
	// memory is the v1 memory controller's directory of the group.
	memory string
	// oom is the v1 memory controller's OOM event, watched so that a
	// process the kernel killed for memory ends the whole agent, as v2's
	// memory.oom.group does.
	oom *os.File
	// oomed is set when the OOM event came.
	oomed     atomic.Bool
	closeOnce sync.Once
	watching  sync.WaitGroup
}

// New makes the group of the agent name (unique among running agents).
func (c *Controller) New(name string) (*Group, error) {
	g := &Group{limits: c.limits}
	if !c.limits.needsCgroup() {
		return g, nil
	}
	if c.v2 != "" {
		m, err := cgroup2.NewManager("/sys/fs/cgroup", filepath.Join(c.v2, name), c.v2Resources())
		if err != nil {
			return nil, err
		}
		g.v2 = m
		return g, nil
	}
	hierarchy := func() ([]cgroup1.Subsystem, error) {
		all, err := cgroup1.Default()
		if err != nil {
			return nil, err
		}
		var use []cgroup1.Subsystem
		for _, s := range all {
			for _, n := range c.v1 {
				if s.Name() == n {
					use = append(use, s)
				}
			}
		}
		return use, nil
	}
	required := func(s cgroup1.Subsystem, _ cgroup1.Path, err error) error {
		return fmt.Errorf("the %s controller: %w", s.Name(), err)
	}
	cg, err := cgroup1.New(cgroup1.NestedPath(filepath.Join(agentsDir, name)), c.v1Resources(),
		cgroup1.WithHierarchy(hierarchy), func(c *cgroup1.InitConfig) error { c.InitCheck = required; return nil })
	if err != nil {
		return nil, err
	}
	if got := len(cg.Subsystems()); got != len(c.v1) {
		_ = cg.Delete()
		return nil, fmt.Errorf("only %d of the controllers %v are mounted", got, c.v1)
	}
	g.v1 = cg
	if c.limits.Memory > 0 {
		path := cgroup1.NestedPath(filepath.Join(agentsDir, name))
		for _, s := range cg.Subsystems() {
			if p, ok := s.(interface{ Path(string) string }); ok && s.Name() == cgroup1.Memory {
				if rel, err := path(cgroup1.Memory); err == nil {
					g.memory = p.Path(rel)
				}
			}
		}
		fd, err := cg.OOMEventFD()
		if err != nil {
			_ = cg.Delete()
			return nil, fmt.Errorf("watching the memory controller's OOM events: %w", err)
		}
		_ = unix.SetNonblock(int(fd), true)
		g.oom = os.NewFile(fd, "oom-event")
		g.watching.Add(1)
		go g.watchOOM()
	}
	return g, nil
}

func (c *Controller) v1Resources() *specs.LinuxResources {
	r := &specs.LinuxResources{}
	l := c.limits
	if l.Memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &l.Memory}
	}
	if l.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &l.Pids}
	}
	if l.CPU > 0 {
		quota, period := int64(l.CPU*cpuPeriod), uint64(cpuPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return r
}

func (c *Controller) v2Resources() *cgroup2.Resources {
	r := &cgroup2.Resources{}
	l := c.limits
	if l.Memory > 0 {
		group := true
		r.Memory = &cgroup2.Memory{Max: &l.Memory, OOMGroup: &group}
	}
	if l.Pids > 0 {
		r.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	if l.CPU > 0 {
		quota, period := int64(l.CPU*cpuPeriod), uint64(cpuPeriod)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
	}
	return r
}

// watchOOM ends the whole group when the kernel kills one of its processes
// for memory, as v2's memory.oom.group has the kernel do.
func (g *Group) watchOOM() {
	defer g.watching.Done()
	var buf [8]byte
	for {
		if _, err := g.oom.Read(buf[:]); err != nil {
			return // closed
		}
		// The event comes as the kernel starts to kill, before its
		// count (oom_kill) says so.
		g.oomed.Store(true)
		g.Kill()
	}
}

// Place puts the process pid, which has not yet run anything of the
// agent's, into the group and under the resource limits; its children
// inherit both.
func (g *Group) Place(pid int) error {
	switch {
	case g.v2 != nil:
		if err := g.v2.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("limits: adding the agent to its cgroup: %w", err)
		}
	case g.v1 != nil:
		if err := g.v1.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("limits: adding the agent to its cgroup: %w", err)
		}
	}
	for _, r := range []struct {
		resource int
		value    uint64
	}{{unix.RLIMIT_NOFILE, g.limits.NoFile}, {unix.RLIMIT_FSIZE, g.limits.FileSize}} {
		if r.value == 0 {
			continue
		}
		var old unix.Rlimit
		if err := unix.Prlimit(pid, r.resource, nil, &old); err != nil {
			return fmt.Errorf("limits: reading the agent's resource limits: %w", err)
		}
		// Never raise a hard limit: that needs a privilege.
		v := min(r.value, old.Max)
		if err := unix.Prlimit(pid, r.resource, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
			return fmt.Errorf("limits: setting the agent's resource limits: %w", err)
		}
	}
	return nil
}

// Kill ends every process of the group, including those that left the
// agent's process group or session, and waits (up to a few seconds) until
// none is left.
func (g *Group) Kill() {
	switch {
	case g.v2 != nil:
		_ = g.v2.Kill()
	case g.v1 != nil:
		// v1 has no cgroup.kill: kill what is there until nothing is
		// (the pids limit bounds a fork loop racing this).
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			pids, err := g.pids()
			if err != nil || len(pids) == 0 {
				return
			}
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// pids lists the processes of the group.
func (g *Group) pids() ([]int, error) {
	switch {
	case g.v2 != nil:
		ps, err := g.v2.Procs(true)
		pids := make([]int, len(ps))
		for i, p := range ps {
			pids[i] = int(p)
		}
		return pids, err
	case g.v1 != nil:
		ps, err := g.v1.Processes(cgroup1.Pids, true)
		pids := make([]int, len(ps))
		for i, p := range ps {
			pids[i] = p.Pid
		}
		return pids, err
	}
	return nil, nil
}

// OOMKilled reports whether the kernel killed a process of the group
// because the group used more than its memory limit.
func (g *Group) OOMKilled() bool {
	switch {
	case g.v2 != nil:
		st, err := g.v2.Stat()
		return err == nil && st.MemoryEvents != nil && (st.MemoryEvents.OomKill > 0 || st.MemoryEvents.OomGroupKill > 0)
	case g.memory != "":
		if g.oomed.Load() {
			return true
		}
		b, err := os.ReadFile(filepath.Join(g.memory, "memory.oom_control"))
		if err != nil {
			return false
		}
		for line := range strings.Lines(string(b)) {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
				return n != "0"
			}
		}
	}
	return false
}

// Close ends every process of the group and removes it.
func (g *Group) Close() {
	g.closeOnce.Do(func() {
		g.Kill()
		if g.oom != nil {
			_ = g.oom.Close()
			g.watching.Wait()
		}
		switch {
		case g.v2 != nil:
			_ = g.v2.Delete()
		case g.v1 != nil:
			_ = g.v1.Delete()
		}
	})
}

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
