//go:build linux

package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// needsCgroup reports whether l sets a limit that only a cgroup enforces.
func (l Limits) needsCgroup() bool { return l.Memory > 0 || l.Pids > 0 || l.CPU > 0 }

// agentsDir is the group, below the gateway's own, that holds one group
// per agent.
const agentsDir = "acp-gateway-agents"

// cpuPeriod is the CFS period, in microseconds, of the CPU quota.
const cpuPeriod = 100000

// v2Mount is where the unified hierarchy is mounted.
const v2Mount = "/sys/fs/cgroup"

// staleAge is how old an empty group in the agents' directory must be for
// Setup to remove it as a leftover: older than any group of a running
// gateway can be while it waits, empty, for its agent (see sweep).
const staleAge = time.Minute

// killWait bounds how long Kill waits for the group's processes to die.
const killWait = 5 * time.Second

// Controller makes a group for each agent. It is safe for concurrent use.
type Controller struct {
	// Log, when set (before the first New), receives what goes wrong as
	// groups are removed; slog.Default() when nil.
	Log *slog.Logger

	limits Limits
	// mount is where the unified hierarchy is mounted (v2Mount but in
	// tests).
	mount string
	// v2 is the unified hierarchy's group that holds the agents' groups
	// (for example /system.slice/acp-gateway.service/acp-gateway-agents);
	// empty where the v1 hierarchies are used.
	v2 string
	// v1 lists the v1 controllers used; empty where v2 is.
	v1 []cgroup1.Name
	// v1All are the host's v1 hierarchies, as Setup found them, and
	// v1Use those of the controllers in v1.
	v1All, v1Use []cgroup1.Subsystem
	// swept counts the stale groups Setup removed.
	swept int
	// instance names this gateway's directory in the agents' directory,
	// which holds its agents' groups, and lock holds its lock (see
	// instancePrefix); empty and nil without a cgroup.
	instance string
	lock     *os.File
	// reaped lists what Setup killed in dead gateways' directories.
	reaped []Reaped
}

// probes numbers the groups Setup makes, unique in the process.
var probes atomic.Int64

// Setup checks that l can be enforced here and returns the Controller that
// enforces it. Resource limits (open files, file size) need nothing; the
// others need a cgroup the gateway may make groups in: where there is
// none, the error (wrapping ErrCgroup) names the fix.
//
// With a cgroup, Setup kills every process that gateways that are gone
// (this one's earlier runs, or a replica beside it that died) left in
// their directories of the agents' directory, SIGKILLed agents' detached
// children included, and removes those (see [Controller.Reaped]); then it
// makes the gateway's own directory and holds its lock until
// [Controller.Close] or the gateway's end. No running gateway's agent is
// touched.
func Setup(l Limits) (*Controller, error) {
	c := &Controller{limits: l, mount: v2Mount}
	if !l.needsCgroup() {
		return c, nil
	}
	var err error
	switch cgroups.Mode() {
	case cgroups.Unified:
		var own string
		if own, err = cgroup2.NestedGroupPath(""); err == nil {
			err = c.setupV2(own)
		}
	case cgroups.Legacy, cgroups.Hybrid:
		err = c.setupV1()
	default:
		err = errors.New("no cgroup file system is mounted at /sys/fs/cgroup")
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%v): run the gateway with a cgroup subtree of its own (systemd: Delegate=yes; a container: a writable cgroup), or set --agent-memory, --agent-pids and --agent-cpu to 0 to run agents without them", ErrCgroup, err)
	}
	c.reaped = c.reap()
	c.swept += c.sweep(time.Now().Add(-staleAge))
	err = c.claim()
	if err == nil {
		// A group made and removed proves the setup.
		var g *Group
		if g, err = c.New(fmt.Sprintf("probe-%d-%d", os.Getpid(), probes.Add(1))); err == nil {
			err = g.close()
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w (%v): run the gateway with a cgroup subtree of its own (systemd: Delegate=yes; a container: a writable cgroup), or set --agent-memory, --agent-pids and --agent-cpu to 0 to run agents without them", ErrCgroup, err)
	}
	return c, nil
}

// agentsDirs lists the directories that hold the agents' groups: one in
// the unified hierarchy, or one in each v1 hierarchy.
func (c *Controller) agentsDirs() []string { return c.dirsIn(c.v1All) }

// dirsIn lists the agents' directories in the unified hierarchy, or in
// the v1 hierarchies given.
func (c *Controller) dirsIn(hierarchies []cgroup1.Subsystem) []string {
	if c.v2 != "" {
		return []string{filepath.Join(c.mount, c.v2)}
	}
	var dirs []string
	for _, s := range hierarchies {
		if dir, ok := v1AgentsDir(s); ok {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// sweep removes the groups that gateways of earlier versions, which made
// their agents' groups right in the agents' directory and locked nothing,
// left behind (killed before they could remove them, with SIGKILL, say),
// and returns how many it removed. (The directories of the gateways that
// lock theirs are reap's.) It looks in every hierarchy, those of
// controllers this gateway does not use included: another configuration
// may have used them.
//
// Such a group says nothing of whether the gateway that made it still
// runs (process ids do not compare across PID namespaces, and names say
// nothing of liveness), so sweep kills nothing, and removes only a group
// that no running gateway needs:
//   - one without processes: rmdir fails on any other, whoever owns it;
//   - one without groups below it: an agent may have made those, and be
//     about to use the empty ones;
//   - one made before before (staleAge ago): the kernel (kernfs) dates a
//     group's directory no earlier than its making, and a gateway places
//     its agent in the group it made within milliseconds. A running
//     gateway's group may be old and empty once its agent has exited,
//     before the gateway removes it: removing it then costs that gateway
//     nothing (Close finds it gone, and the v1 OOM event that its removal
//     fires is not taken for one).
func (c *Controller) sweep(before time.Time) int {
	n := 0
	for _, dir := range c.agentsDirs() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || strings.HasPrefix(e.Name(), instancePrefix) {
				continue
			}
			group := filepath.Join(dir, e.Name())
			info, err := os.Stat(group)
			if err != nil || !info.ModTime().Before(before) || hasSubgroups(group) {
				continue
			}
			if syscall.Rmdir(group) == nil {
				n++
			}
		}
	}
	return n
}

// hasSubgroups reports whether the group at dir has groups below it (or
// cannot be read).
func hasSubgroups(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.IsDir() {
			return true
		}
	}
	return false
}

// Limits returns what the Controller enforces.
func (c *Controller) Limits() Limits { return c.limits }

// Describe says what is enforced and how, for the start-up log.
func (c *Controller) Describe() string {
	switch {
	case !c.limits.needsCgroup():
		return c.limits.String() + " (resource limits)"
	case c.v2 != "":
		return c.limits.String() + " (cgroup v2 " + filepath.Join(c.v2, c.instance) + c.sweptString() + ")"
	}
	names := make([]string, len(c.v1))
	for i, n := range c.v1 {
		names[i] = string(n)
	}
	return c.limits.String() + " (cgroup v1 " + strings.Join(names, ",") + " " + filepath.Join(agentsDir, c.instance) + c.sweptString() + ")"
}

func (c *Controller) sweptString() string {
	if c.swept == 0 {
		return ""
	}
	return fmt.Sprintf("; removed %d stale agent groups", c.swept)
}

// setupV1 picks the v1 controllers the limits need, and finds their
// hierarchies once for every group New makes. The pids controller is
// always used: it lists the group's processes, to end them all.
func (c *Controller) setupV1() error {
	c.v1 = []cgroup1.Name{cgroup1.Pids}
	if c.limits.Memory > 0 {
		c.v1 = append(c.v1, cgroup1.Memory)
	}
	if c.limits.CPU > 0 {
		c.v1 = append(c.v1, cgroup1.Cpu)
	}
	all, err := cgroup1.Default()
	if err != nil {
		return err
	}
	c.v1All = all
	for _, s := range all {
		if slices.Contains(c.v1, s.Name()) {
			c.v1Use = append(c.v1Use, s)
		}
	}
	if len(c.v1Use) != len(c.v1) {
		return fmt.Errorf("only %d of the controllers %v are mounted", len(c.v1Use), c.v1)
	}
	return nil
}

// v2Controllers lists the controllers the limits need in the unified
// hierarchy. The pids controller is not among them unless its limit is
// set: cgroup.procs, which lists a group's processes, and cgroup.kill are
// there without any controller.
func (l Limits) v2Controllers() []string {
	var c []string
	if l.Memory > 0 {
		c = append(c, "memory")
	}
	if l.Pids > 0 {
		c = append(c, "pids")
	}
	if l.CPU > 0 {
		c = append(c, "cpu")
	}
	return c
}

// setupV2 enables the controllers the limits need for the groups below
// own, the gateway's own group, moving the gateway into a leaf of it where
// it must: a group whose controllers its children get may hold no
// processes ("no internal processes").
func (c *Controller) setupV2(own string) error {
	controllers := c.limits.v2Controllers()
	want := "+" + strings.Join(controllers, " +")
	dir := filepath.Join(c.mount, own)
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err := os.WriteFile(ctl, []byte(want), 0)
	if errors.Is(err, syscall.EBUSY) {
		leaf := filepath.Join(dir, "gateway")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("moving the gateway into %s: %w", leaf, err)
		}
		err = os.WriteFile(ctl, []byte(want), 0)
		if errors.Is(err, syscall.EBUSY) {
			if others := groupProcs(dir); len(others) > 0 {
				return fmt.Errorf("enabling the %s controllers of %s: %w: processes other than the gateway share its cgroup (%v, a wrapper such as tini?): run the gateway as the first process of its own cgroup, or move them", strings.Join(controllers, ", "), own, err, others)
			}
		}
	}
	if err != nil {
		offered, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return fmt.Errorf("enabling the %s controllers of %s (it offers %q): %w", strings.Join(controllers, ", "), own, strings.TrimSpace(string(offered)), err)
	}
	c.v2 = filepath.Join(own, agentsDir)
	return nil
}

// groupProcs lists the processes directly in the v2 group at dir.
func groupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// Group is one agent's group.
type Group struct {
	limits Limits
	log    *slog.Logger
	v1     cgroup1.Cgroup
	v2     *cgroup2.Manager
	// dir is the v2 group's directory.
	dir string
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
	g := &Group{limits: c.limits, log: c.Log}
	if g.log == nil {
		g.log = slog.Default()
	}
	if !c.limits.needsCgroup() {
		return g, nil
	}
	if c.v2 != "" {
		return g, c.newV2(g, name)
	}
	hierarchy := func() ([]cgroup1.Subsystem, error) { return c.v1Use, nil }
	required := func(s cgroup1.Subsystem, _ cgroup1.Path, err error) error {
		return fmt.Errorf("the %s controller: %w", s.Name(), err)
	}
	cg, err := cgroup1.New(cgroup1.NestedPath(filepath.Join(agentsDir, c.instance, name)), c.v1Resources(),
		cgroup1.WithHierarchy(hierarchy), func(c *cgroup1.InitConfig) error { c.InitCheck = required; return nil })
	if err != nil {
		return nil, err
	}
	g.v1 = cg
	if c.limits.Memory > 0 {
		path := cgroup1.NestedPath(filepath.Join(agentsDir, c.instance, name))
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

// newV2 makes g's group, name, in the unified hierarchy.
func (c *Controller) newV2(g *Group, name string) error {
	group := filepath.Join(c.v2, c.instance, name)
	m, err := cgroup2.NewManager(c.mount, group, c.v2Resources())
	if err != nil {
		return err
	}
	g.v2, g.dir = m, filepath.Join(c.mount, group)
	return nil
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
		if _, err := os.Stat(g.memory); errors.Is(err, fs.ErrNotExist) {
			// The event also comes when the group is removed: by another
			// gateway's sweep, once the agent had gone.
			return
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
// agent's process group or session, and waits (up to killWait) until none
// is left, so that the group can then be removed.
func (g *Group) Kill() {
	deadline := time.Now().Add(killWait)
	switch {
	case g.v2 != nil:
		// cgroup.kill kills every process of the group, and those forked
		// while it does; the kernel reports their end in cgroup.events.
		for kill := time.Now(); ; {
			if !time.Now().Before(kill) {
				if !g.killV2() {
					return // the group is gone
				}
				kill = time.Now().Add(100 * time.Millisecond)
			}
			if !g.populated() || !time.Now().Before(deadline) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	case g.v1 != nil:
		// v1 has no cgroup.kill: kill what is there until nothing is
		// (the pids limit bounds a fork loop racing this).
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

// killV2 writes the v2 group's cgroup.kill (or, on a kernel without it,
// signals its processes) and reports whether the group is still there.
func (g *Group) killV2() bool {
	err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0)
	if err == nil {
		return true
	}
	if _, statErr := os.Stat(g.dir); errors.Is(statErr, fs.ErrNotExist) {
		return false
	}
	_ = g.v2.Kill() // before Linux 5.14: freeze, signal each, thaw
	return true
}

// populated reports whether the v2 group, or a group below it, holds a
// process (that has not yet exited).
func (g *Group) populated() bool { return g.event("populated") == "1" }

// event returns the value of key in the v2 group's cgroup.events, or ""
// when the group is gone.
func (g *Group) event(key string) string {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			return v
		}
	}
	return ""
}

// Freeze stops every process of the group, those that left the agent's
// process group or session included, until Thaw, and returns once they
// are stopped (or fails after killWait). On cgroup v2 it uses the group's
// freezer (cgroup.freeze), which the processes can neither see nor undo.
// The v1 freezer is a hierarchy of its own that the gateway is not given,
// so on v1 each process of the group gets SIGSTOP, until a look at the
// group finds none that has not had it (a stopped process forks no more).
// Kill and Close end a frozen group as they do any other.
func (g *Group) Freeze() error { return g.setFrozen(true) }

// Thaw lets the processes of a group Freeze stopped run again.
func (g *Group) Thaw() error { return g.setFrozen(false) }

func (g *Group) setFrozen(frozen bool) error {
	state, sig := "0", syscall.SIGCONT
	if frozen {
		state, sig = "1", syscall.SIGSTOP
	}
	switch {
	case g.v2 != nil:
		return g.freezeV2(state)
	case g.v1 != nil:
		return g.signalEach(sig)
	}
	return ErrNoFreezer
}

// freezeV2 writes state ("1": frozen, "0": thawed) to the v2 group's
// cgroup.freeze and waits until cgroup.events says the group is in it.
func (g *Group) freezeV2(state string) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.freeze"), []byte(state), 0); err != nil {
		return fmt.Errorf("limits: writing cgroup.freeze: %w", err)
	}
	for deadline := time.Now().Add(killWait); g.event("frozen") != state; time.Sleep(time.Millisecond) {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("limits: the group's processes did not reach frozen %s within %v", state, killWait)
		}
	}
	return nil
}

// signalEach sends sig to every process of the v1 group, and again to
// those that appear meanwhile, until a look finds no new one.
func (g *Group) signalEach(sig syscall.Signal) error {
	sent := map[int]bool{}
	for deadline := time.Now().Add(killWait); time.Now().Before(deadline); {
		pids, err := g.pids()
		if err != nil {
			return fmt.Errorf("limits: listing the group's processes: %w", err)
		}
		fresh := false
		for _, p := range pids {
			if !sent[p] {
				sent[p], fresh = true, true
				_ = syscall.Kill(p, sig)
			}
		}
		if !fresh {
			return nil
		}
	}
	return fmt.Errorf("limits: the group's processes kept changing for %v", killWait)
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

// Close ends every process of the group and removes it; what goes wrong
// is logged.
func (g *Group) Close() {
	if err := g.close(); err != nil {
		g.log.Warn("removing an agent's cgroup", "error", err)
	}
}

// close ends every process of the group and removes it, the first time it
// is called.
func (g *Group) close() (err error) {
	g.closeOnce.Do(func() {
		g.Kill()
		if g.oom != nil {
			_ = g.oom.Close()
			g.watching.Wait()
		}
		switch {
		case g.v2 != nil:
			if _, statErr := os.Stat(g.dir); errors.Is(statErr, fs.ErrNotExist) {
				return // another gateway's sweep removed it, empty
			}
			err = g.v2.Delete()
		case g.v1 != nil:
			// Where the group is gone it goes on to the next hierarchy.
			err = g.v1.Delete()
		}
	})
	return err
}
