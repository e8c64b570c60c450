//go:build linux

package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// setup is Setup, the Controller closed when the test ends.
func setup(t *testing.T, l Limits) (*Controller, error) {
	t.Helper()
	c, err := Setup(l)
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// start runs script with /bin/sh -c, in a new session of its own, placed in
// a new group of c before it runs anything (it waits on its stdin for the
// word to go).
func start(t *testing.T, c *Controller, script string) (*Group, *exec.Cmd, *output) {
	t.Helper()
	g, err := c.New(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	cmd, out := startIn(t, g, script)
	return g, cmd, out
}

// startIn is start in the group g.
func startIn(t *testing.T, g *Group, script string) (*exec.Cmd, *output) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read -r _ || exit 1\n"+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := &output{f.Name()}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// output is what a started script printed, in a file: its children
// inherit the file, not a pipe that would keep a copying goroutine alive.
type output struct{ path string }

func (o *output) String() string {
	b, _ := os.ReadFile(o.path)
	return string(b)
}

func TestPidsLimitBoundsTheTree(t *testing.T) {
	c, err := setup(t, Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	// The shell gives up at the first fork the limit refuses.
	g, cmd, out := start(t, c, "for i in $(seq 60); do sleep 30 & done; echo started; wait")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the fork loop did not fail: %s", out)
	}
	if !strings.Contains(out.String(), "fork") {
		t.Errorf("no fork failed: %q", out)
	}
	pids, err := g.pids()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) < 10 || len(pids) > 16 {
		t.Errorf("the group holds %d processes, want 10 to 16", len(pids))
	}
	g.Close()
	if pids, err := g.pids(); err == nil && len(pids) > 0 {
		t.Errorf("%d processes outlived Close", len(pids))
	}
}

func TestMemoryLimitKillsTheWholeGroup(t *testing.T) {
	c, err := setup(t, Limits{Memory: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// A sibling that stays small, and a tail that buffers 200 MB.
	g, cmd, _ := start(t, c, "setsid sleep 60 & head -c 200000000 /dev/zero | tail; wait")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the group was not killed")
	}
	if !g.OOMKilled() {
		t.Error("OOMKilled is false")
	}
	testutil.WaitFor(t, "every process of the group ends", func() bool {
		procs, err := g.pids()
		return err == nil && len(procs) == 0
	})
}

func TestCloseKillsProcessesThatLeftTheSession(t *testing.T) {
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	g, _, out := start(t, c, "setsid sh -c 'sleep 600' & echo $!; wait")
	testutil.WaitFor(t, "the child starts", func() bool { return strings.Contains(out.String(), "\n") })
	procs, err := g.pids()
	if err != nil || len(procs) < 2 {
		t.Fatalf("procs %v, %v", procs, err)
	}
	g.Close()
	for _, p := range procs {
		if procfs.Alive(p) {
			t.Errorf("process %d outlived Close", p)
		}
	}
}

func TestResourceLimitsNeedNoCgroup(t *testing.T) {
	c, err := setup(t, Limits{NoFile: 64, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.v2 != "" || len(c.v1) != 0 {
		t.Errorf("a cgroup is used for resource limits alone: %+v", c)
	}
	_, cmd, out := start(t, c, "ulimit -n; head -c 2000000 /dev/zero > "+t.TempDir()+"/big; echo status $?")
	_ = cmd.Wait()
	if got := out.String(); !strings.HasPrefix(got, "64\n") || strings.Contains(got, "status 0") {
		t.Errorf("got %q, want 64 open files and a write cut at 1 MiB", got)
	}
}

func TestDescribeAndResources(t *testing.T) {
	l := Limits{Memory: 4 << 30, Pids: 1024, CPU: 1.5, NoFile: 4096, FileSize: 512 << 20}
	if got := l.String(); got != "memory 4 GiB, 1024 processes, 1.5 CPU, 4096 open files, files up to 512 MiB" {
		t.Errorf("String: %q", got)
	}
	if got := (Limits{}).String(); got != "none" {
		t.Errorf("String of none: %q", got)
	}
	r := Limits{Memory: 1, CPU: 2}.Resources()
	if len(r) != 2 || r["memory_bytes"] != 1 || r["cpu"] != 2 {
		t.Errorf("Resources: %v", r)
	}
}

// Setup removes the groups gateways left behind, but only those that are
// empty, have no groups below them, and were made over staleAge ago: a
// group a running gateway just made, or one with processes, stays.
func TestSetupSweepsOnlyStaleEmptyGroups(t *testing.T) {
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Skip(err)
	}
	dirs := c.agentsDirs()
	if len(dirs) == 0 {
		t.Fatal("no agents' directory")
	}
	old := time.Now().Add(-2 * staleAge)
	prefix := fmt.Sprintf("sweep-%d-%d-", os.Getpid(), time.Now().UnixNano())
	mk := func(dir, name string, age time.Time) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
		if !age.IsZero() {
			if err := os.Chtimes(p, age, age); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	type want struct {
		path string
		kept bool
	}
	var wants []want
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		nested := mk(dir, prefix+"nested", time.Time{})
		mk(nested, "below", time.Time{})
		if err := os.Chtimes(nested, old, old); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(filepath.Join(nested, "below")) })
		wants = append(wants,
			want{mk(dir, prefix+"stale", old), false},
			want{mk(dir, prefix+"new", time.Time{}), true},
			want{nested, true})
	}
	// A group with a process in it, as old, of a gateway of an earlier
	// version (right in the agents' directory).
	legacy := *c
	legacy.instance = ""
	busy, err := legacy.New(prefix + "busy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(busy.Close)
	startIn(t, busy, "sleep 60")
	for _, dir := range dirs {
		p := filepath.Join(dir, prefix+"busy")
		if _, err := os.Stat(p); err == nil {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			wants = append(wants, want{p, true})
		}
	}
	testutil.WaitFor(t, "the busy group holds its process", func() bool {
		pids, err := busy.pids()
		return err == nil && len(pids) > 0
	})
	// This gateway's own directory, as old, is not sweep's.
	own := filepath.Join(c.primaryDir(), c.instance)
	if err := os.Chtimes(own, old, old); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{own, true})
	// (The gateways or tests running beside this one may sweep too.)
	c.sweep(time.Now().Add(-staleAge))
	for _, w := range wants {
		_, err := os.Stat(w.path)
		if kept := err == nil; kept != w.kept {
			t.Errorf("%s: kept %v, want %v", w.path, kept, w.kept)
		}
	}
}

// unifiedTest returns a Controller, with no limits, whose agents' groups
// are made below a new group of the unified hierarchy (where the host has
// one the test may write), removed when the test ends.
func unifiedTest(t *testing.T) *Controller {
	t.Helper()
	mount := v2Mount
	var st unix.Statfs_t
	if unix.Statfs(mount, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		mount = filepath.Join(v2Mount, "unified") // a hybrid host's
		if unix.Statfs(mount, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			t.Skip("no cgroup v2 hierarchy")
		}
	}
	own, err := cgroup2.NestedGroupPath(fmt.Sprintf("limits-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Skip(err)
	}
	if err := os.Mkdir(filepath.Join(mount, own), 0o755); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { removeTree(filepath.Join(mount, own)) })
	return &Controller{mount: mount, v2: filepath.Join(own, agentsDir)}
}

// On cgroup v2, Kill waits until the processes it killed are gone, so
// that Close then removes the group.
func TestV2CloseRemovesTheGroupOfAKilledTree(t *testing.T) {
	c := unifiedTest(t)
	g := &Group{log: slog.Default()}
	if err := c.newV2(g, "agent"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.close() })
	_, out := startIn(t, g, "for i in $(seq 40); do setsid sleep 600 & done; echo started; wait")
	testutil.WaitFor(t, "the tree starts", func() bool {
		pids, err := g.pids()
		return strings.Contains(out.String(), "started") && err == nil && len(pids) > 40
	})
	if err := g.close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(g.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the group outlived Close: %v", err)
	}
}

// A group another gateway's sweep removed is no error to Close.
func TestV2CloseOfARemovedGroup(t *testing.T) {
	c := unifiedTest(t)
	g := &Group{log: slog.Default()}
	if err := c.newV2(g, "agent"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(g.dir); err != nil {
		t.Fatal(err)
	}
	if err := g.close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// Only the controllers the limits need are asked for; a host that does
// not offer one is named in the error.
func TestV2Controllers(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		want string
	}{
		{Limits{Memory: 1}, "memory"},
		{Limits{Pids: 1, NoFile: 5}, "pids"},
		{Limits{Memory: 1, Pids: 1, CPU: 1}, "memory pids cpu"},
	} {
		if got := strings.Join(c.l.v2Controllers(), " "); got != c.want {
			t.Errorf("%v: %q, want %q", c.l, got, c.want)
		}
	}
	ctl := unifiedTest(t)
	offered, err := os.ReadFile(filepath.Join(ctl.mount, filepath.Dir(ctl.v2), "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(offered), "cpu") {
		t.Skip("the test's group offers the cpu controller")
	}
	ctl.limits = Limits{CPU: 1}
	err = ctl.setupV2(filepath.Dir(ctl.v2))
	if err == nil || !strings.Contains(err.Error(), "enabling the cpu controllers") || !strings.Contains(err.Error(), "it offers") {
		t.Errorf("setupV2 where cpu is not offered: %v", err)
	}
}

// removeTree removes the group at dir and those below it, once they are
// empty (for a few seconds).
func removeTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	for deadline := time.Now().Add(5 * time.Second); os.Remove(dir) != nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// A group removed from under the gateway (by another gateway's sweep, once
// its agent had gone) is not taken for one whose agent ran out of memory,
// though v1 signals its OOM event then, and Close does not fail on it.
func TestARemovedGroupIsNoOOM(t *testing.T) {
	c, err := setup(t, Limits{Memory: 32 << 20})
	if err != nil {
		t.Skip(err)
	}
	name := fmt.Sprintf("removed-%d-%d", os.Getpid(), time.Now().UnixNano())
	g, err := c.New(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range c.agentsDirs() {
		if err := os.Remove(filepath.Join(dir, c.instance, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // for the event, if one comes
	if g.OOMKilled() {
		t.Error("OOMKilled is true")
	}
	if err := g.close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// die drops c's lock without removing its directory, as the kernel does
// when the gateway is killed.
func die(c *Controller) {
	_ = c.lock.Close()
	c.lock = nil
}

// setupWithGroup sets up a Controller with a pids limit, and makes a
// group, agent, in it.
func setupWithGroup(t *testing.T) (*Controller, *Group) {
	t.Helper()
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.New("agent")
	if err != nil {
		t.Fatal(err)
	}
	return c, g
}

// A gateway that dies leaves its agents' trees, the children that left
// the agent's session and ignore SIGTERM and SIGHUP included: the next
// gateway to start kills them and removes the dead gateway's directory,
// and leaves alone the agent of a gateway that runs beside it.
func TestSetupKillsWhatADeadGatewayLeft(t *testing.T) {
	dead, g := setupWithGroup(t)
	_, out := startIn(t, g, `setsid sh -c 'trap "" TERM HUP; sleep 600 & echo $!' </dev/null`)
	var detached int
	testutil.WaitFor(t, "the detached child starts", func() bool {
		var err error
		detached, err = strconv.Atoi(strings.TrimSpace(out.String()))
		return err == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(detached, syscall.SIGKILL) })
	live, lg := setupWithGroup(t)
	t.Cleanup(lg.Close)
	liveCmd, _ := startIn(t, lg, "sleep 600")
	testutil.WaitFor(t, "the live gateway's agent is in its group", func() bool {
		pids, err := lg.pids()
		return err == nil && len(pids) > 0
	})

	die(dead)
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	if procfs.Alive(detached) {
		t.Errorf("the dead gateway's agent's detached child (pid %d) outlived Setup", detached)
	}
	for _, dir := range c.agentsDirs() {
		if _, err := os.Stat(filepath.Join(dir, dead.instance)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the dead gateway's directory is left in %s: %v", dir, err)
		}
	}
	// (A gateway or test starting beside this one may have reaped it.)
	for _, r := range c.Reaped() {
		if r.Group == filepath.Join(c.primaryDir(), dead.instance) && (r.Killed < 1 || r.Err != nil) {
			t.Errorf("Reaped %+v, want 1 or more killed, no error", r)
		}
	}
	if !procfs.Alive(liveCmd.Process.Pid) {
		t.Error("the live gateway's agent was killed")
	}
	if _, err := os.Stat(filepath.Join(live.primaryDir(), live.instance, "agent")); err != nil {
		t.Errorf("the live gateway's agent's group: %v", err)
	}
}

// A directory whose lock is free is reaped only where a process is left
// in it, or where it is older than staleAge: a newer empty one may be a
// starting gateway's, not yet locked. A running gateway's stays, however
// old.
func TestReapLeavesNewAndRunningGateways(t *testing.T) {
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleAge)
	mk := func(name string, age time.Time) string {
		t.Helper()
		p := filepath.Join(c.primaryDir(), fmt.Sprintf("%stest-%d-%s", instancePrefix, os.Getpid(), name))
		if err := os.MkdirAll(filepath.Join(p, heldGroup), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = removeGroups(p) })
		if !age.IsZero() {
			if err := os.Chtimes(p, age, age); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	young, stale := mk("young", time.Time{}), mk("stale", old)
	running, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(running.primaryDir(), running.instance)
	if err := os.Chtimes(own, old, old); err != nil {
		t.Fatal(err)
	}
	c.reap()
	for _, w := range []struct {
		path string
		kept bool
	}{{young, true}, {stale, false}, {own, true}} {
		_, err := os.Stat(w.path)
		if kept := err == nil; kept != w.kept {
			t.Errorf("%s: kept %v, want %v", w.path, kept, w.kept)
		}
	}
}

// On cgroup v2 too, a dead gateway's detached processes are killed and its
// directory removed.
func TestV2ReapKillsWhatADeadGatewayLeft(t *testing.T) {
	dead := unifiedTest(t)
	if err := dead.claim(); err != nil {
		t.Fatal(err)
	}
	g := &Group{log: slog.Default()}
	if err := dead.newV2(g, "agent"); err != nil {
		t.Fatal(err)
	}
	_, out := startIn(t, g, `setsid sh -c 'trap "" TERM HUP; sleep 600 & echo $!' </dev/null`)
	testutil.WaitFor(t, "the detached child to start", func() bool { return strings.HasSuffix(out.String(), "\n") })
	detached, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(detached, syscall.SIGKILL) })
	die(dead)
	c := &Controller{mount: dead.mount, v2: dead.v2}
	reaped := c.reap()
	if procfs.Alive(detached) {
		t.Errorf("the detached child (pid %d) outlived the reap", detached)
	}
	want := filepath.Join(dead.primaryDir(), dead.instance)
	if len(reaped) != 1 || reaped[0].Group != want || reaped[0].Killed != 1 || reaped[0].Err != nil {
		t.Errorf("reaped %+v, want %s with 1 killed", reaped, want)
	}
	if _, err := os.Stat(want); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead gateway's directory: %v", err)
	}
}

// Freeze stops every process of the group, those that left its session
// among them, and Thaw lets them run on: on cgroup v1 by signals, on v2 by
// the group's freezer.
func TestFreezeStopsTheWholeGroupUntilThaw(t *testing.T) {
	name := func() string { return fmt.Sprintf("freeze-%d-%d", os.Getpid(), time.Now().UnixNano()) }
	for _, c := range []struct {
		name  string
		group func(t *testing.T) *Group
	}{
		{"v1", func(t *testing.T) *Group {
			c, err := Setup(Limits{Pids: 64})
			if err != nil {
				t.Fatal(err)
			}
			if c.v2 != "" {
				t.Skip("the host's cgroups are v2: the v2 case covers it")
			}
			g, err := c.New(name())
			if err != nil {
				t.Fatal(err)
			}
			return g
		}},
		{"v2", func(t *testing.T) *Group {
			g := &Group{log: slog.Default()}
			if err := unifiedTest(t).newV2(g, name()); err != nil {
				t.Fatal(err)
			}
			return g
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := c.group(t)
			t.Cleanup(g.Close)
			ticks := filepath.Join(t.TempDir(), "ticks")
			_, out := startIn(t, g, "setsid sh -c 'while :; do echo >> "+ticks+"; sleep 0.01; done' & echo started; wait")
			testutil.WaitFor(t, "the tree to tick", func() bool {
				b, _ := os.ReadFile(ticks)
				return strings.Contains(out.String(), "started") && len(b) > 0
			})
			if err := g.Freeze(); err != nil {
				t.Fatal(err)
			}
			pids, err := g.pids()
			if err != nil || len(pids) < 2 {
				t.Fatalf("the group holds %v, %v", pids, err)
			}
			if g.v2 != nil {
				if got := g.event("frozen"); got != "1" {
					t.Fatalf("cgroup.events says frozen %q after Freeze", got)
				}
			} else {
				for _, p := range pids {
					testutil.WaitFor(t, fmt.Sprintf("process %d (%s, state %s) to stop", p, procfs.Cmdline(p), procState(p)), func() bool { return testutil.Stopped(p) })
				}
			}
			b, _ := os.ReadFile(ticks)
			if err := g.Thaw(); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "the tree to tick again", func() bool {
				now, _ := os.ReadFile(ticks)
				return len(now) > len(b)+2
			})
			g.Close()
			for _, p := range pids {
				if s := procState(p); s != "" && s != "Z" {
					t.Errorf("process %d (state %s) outlived Close", p, s)
				}
			}
		})
	}
}

// A group without a cgroup has no freezer: the caller stops its
// processes some other way.
func TestFreezeWithoutACgroup(t *testing.T) {
	c, err := Setup(Limits{NoFile: 64})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.New("no-cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Freeze(); !errors.Is(err, ErrNoFreezer) {
		t.Errorf("Freeze: %v, want ErrNoFreezer", err)
	}
	if err := g.Thaw(); !errors.Is(err, ErrNoFreezer) {
		t.Errorf("Thaw: %v, want ErrNoFreezer", err)
	}
}

// procState is the state letter of process pid, "" when it is gone.
func procState(pid int) string {
	p, ok := procfs.Stat(pid)
	if !ok {
		return ""
	}
	return string(p.State)
}

// A gateway's directory is its owner's alone: another user could
// otherwise open it and hold its lock, and stall the gateway's start.
func TestGatewaysDirectoryIsItsOwnersAlone(t *testing.T) {
	c, err := setup(t, Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(c.primaryDir(), c.instance))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		t.Fatalf("the gateway's directory has mode %v, want no access for others", perm)
	}
}

// A Controller's directory stays locked until Close, even once nothing
// references the Controller: were its lock file left to the garbage
// collector, whose finalizer closes it, the next gateway's reap would take
// a running gateway for gone and kill its agents.
func TestLockLastsUntilCloseNotUntilCollected(t *testing.T) {
	c, err := Setup(Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	// What Close does, without holding the Controller or its lock file.
	dir, dirs, instance := filepath.Join(c.primaryDir(), c.instance), c.agentsDirs(), c.instance
	t.Cleanup(func() {
		heldLocks.Range(func(k, _ any) bool {
			if f := k.(*os.File); f.Name() == dir {
				heldLocks.Delete(f)
				_ = f.Close()
			}
			return true
		})
		for _, d := range dirs {
			_ = removeGroups(filepath.Join(d, instance))
		}
	})
	c = nil //nolint:wastedassign,ineffassign // dropped: only the collector could close its lock now
	for range 3 {
		runtime.GC()
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock of a collected Controller's directory: %v, want EWOULDBLOCK (still held)", err)
	}
}
