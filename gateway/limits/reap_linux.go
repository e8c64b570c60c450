//go:build linux

package limits

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// Each gateway makes its agents' groups in a directory of its own in the
// agents' directory, named instancePrefix, its pid and a random part
// (gateway-4711-1a2b3c4d), and holds a lock (flock(2)) on that directory
// in its primary hierarchy (the unified one, or v1's pids) for as long as
// it runs. The kernel drops the lock when the gateway dies, however it
// dies, so a directory whose lock can be taken is a dead gateway's: Setup
// kills every process left in it and removes it. The lock is on the
// directory's inode, which every mount of the hierarchy shares, so it
// holds across PID namespaces and containers, where pids say nothing.
const instancePrefix = "gateway-"

// heldGroup is an empty group kept in each gateway's directory, so that
// the directory is never a group without groups below it, which the sweep
// of a gateway of an earlier version would remove once it is stale.
const heldGroup = "held"

// Reaped lists the directories of gateways that are gone where Setup
// killed processes (or failed to).
func (c *Controller) Reaped() []Reaped { return c.reaped }

// primaryDir is the agents' directory in the hierarchy that lists every
// process of an agent and holds the gateways' locks: the unified one, or
// v1's pids (always used); empty where there is none.
func (c *Controller) primaryDir() string {
	if c.v2 != "" {
		return filepath.Join(c.mount, c.v2)
	}
	for _, s := range c.v1All {
		if s.Name() == cgroup1.Pids {
			dir, _ := v1AgentsDir(s)
			return dir
		}
	}
	return ""
}

// v1AgentsDir is the agents' directory in the v1 hierarchy of s.
func v1AgentsDir(s cgroup1.Subsystem) (string, bool) {
	p, ok := s.(interface{ Path(string) string })
	if !ok {
		return "", false
	}
	rel, err := cgroup1.NestedPath(agentsDir)(s.Name())
	if err != nil {
		return "", false
	}
	return p.Path(rel), true
}

// ownDirs lists the agents' directories of the hierarchies this gateway
// makes its groups in.
func (c *Controller) ownDirs() []string { return c.dirsIn(c.v1Use) }

// claim makes this gateway's directory and takes its lock.
func (c *Controller) claim() error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := instancePrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	dir := filepath.Join(c.primaryDir(), name)
	// Its owner's alone: no other user can open it to hold its lock.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	// A gateway that starts may hold it for a moment, to look; a lock held
	// for longer is not waited on for ever.
	if err := lockWithin(f, claimWait); err != nil {
		_ = f.Close()
		return fmt.Errorf("locking %s: %w", dir, err)
	}
	// Nothing removes a directory as new as this one (see reapDir); were
	// it gone, the lock would guard nothing.
	held, err1 := f.Stat()
	now, err2 := os.Stat(dir)
	if err := errors.Join(err1, err2); err != nil || !os.SameFile(held, now) {
		_ = f.Close()
		return fmt.Errorf("locking %s: removed as it was locked (%v)", dir, err)
	}
	c.instance, c.lock = name, f
	heldLocks.Store(f, struct{}{})
	for _, d := range c.ownDirs() {
		if err := os.MkdirAll(filepath.Join(d, name, heldGroup), 0o755); err != nil {
			c.Close()
			return err
		}
	}
	return nil
}

// claimWait bounds the wait for the lock of a gateway's new directory.
const claimWait = 10 * time.Second

// lockWithin takes f's exclusive lock, waiting at most wait for whoever
// holds it.
func lockWithin(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another process held its lock for %v", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flock applies how (unix.LOCK_EX, with unix.LOCK_NB or not) to f.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Close gives up the Controller's directory: it removes the directory, as
// far as no process is left in it, and drops the lock, after which the
// next gateway to start kills what is left. Call it once every Group it
// made is closed; it does nothing more the second time.
func (c *Controller) Close() {
	if c.lock == nil {
		return
	}
	for _, dir := range c.agentsDirs() {
		_ = removeGroups(filepath.Join(dir, c.instance))
	}
	heldLocks.Delete(c.lock)
	_ = c.lock.Close()
	c.lock = nil
}

// heldLocks holds the lock files of the Controllers not closed: a file
// left to the garbage collector is closed by its finalizer, and with it
// the lock, and a running gateway would pass for gone to the next one's
// reap. A Controller's lock lasts until Close, however it is referenced.
var heldLocks sync.Map // *os.File -> struct{}

// reap kills the processes that gateways that are gone left in their
// directories, and removes those; it returns the directories where it
// found processes, and counts the others it removed in c.swept.
func (c *Controller) reap() []Reaped {
	var names []string
	for _, dir := range c.agentsDirs() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), instancePrefix) && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	var reaped []Reaped
	for _, name := range names {
		if r, ok := c.reapDir(name); ok && (r.Killed > 0 || r.Err != nil) {
			reaped = append(reaped, r)
		} else if ok {
			c.swept++
		}
	}
	return reaped
}

// reapDir kills the processes in the directory name of a gateway that is
// gone, and removes it from every hierarchy. It reports false, doing
// nothing, where the gateway runs (its lock is held), or may be making its
// directory: one without processes made in the last staleAge.
func (c *Controller) reapDir(name string) (Reaped, bool) {
	r := Reaped{Group: filepath.Join(c.primaryDir(), name)}
	f, err := os.Open(r.Group)
	switch {
	case err == nil:
		defer f.Close()
		if flock(f, unix.LOCK_EX|unix.LOCK_NB) != nil {
			return r, false // its gateway runs
		}
		// The lock is ours until f closes: no gateway takes it meanwhile.
		info, err := f.Stat()
		if err != nil || len(treeProcs(r.Group)) == 0 && !info.ModTime().Before(time.Now().Add(-staleAge)) {
			return r, false
		}
		var left []int
		r.Killed, left = killTree(r.Group, time.Now().Add(killWait))
		if len(left) > 0 {
			r.Err = fmt.Errorf("%d processes could not be killed: %v", len(left), left)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return r, false
	}
	// Groups in other hierarchies whose primary group is gone hold no
	// process any more: every process is in one group of each hierarchy.
	for _, dir := range c.agentsDirs() {
		if err := removeGroups(filepath.Join(dir, name)); err != nil {
			r.Err = errors.Join(r.Err, err)
		}
	}
	return r, true
}

// killTree kills, with SIGKILL, every process in the group at dir and the
// groups below it, until none is left or deadline passes; it returns how
// many it killed and which it could not. A pid is signalled through a
// pidfd opened before the group is listed again, so that a process that
// exited, and whose pid another process took since, is not signalled.
func killTree(dir string, deadline time.Time) (killed int, left []int) {
	seen := map[int]bool{}
	for {
		pids := treeProcs(dir)
		if len(pids) == 0 || !time.Now().Before(deadline) {
			return killed, pids
		}
		fds := make(map[int]int, len(pids))
		for _, pid := range pids {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				fds[pid] = fd
			} else if errors.Is(err, unix.ENOSYS) {
				fds[pid] = -1 // before Linux 5.3
			}
		}
		still := map[int]bool{}
		for _, pid := range treeProcs(dir) {
			still[pid] = true
		}
		for pid, fd := range fds {
			var err error
			switch {
			case !still[pid]:
				err = unix.ESRCH
			case fd < 0:
				err = unix.Kill(pid, unix.SIGKILL)
			default:
				err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			if err == nil && !seen[pid] {
				seen[pid] = true
				killed++
			}
			if fd >= 0 {
				_ = unix.Close(fd)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// treeProcs lists the processes in the group at dir and the groups below
// it (those this process's PID namespace sees).
func treeProcs(dir string) []int {
	var pids []int
	seen := map[int]bool{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil //nolint:nilerr // a group gone meanwhile has no processes left: walk on
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeGroups removes the group at dir and the groups below it, those
// without processes; it is no error that dir is gone.
func removeGroups(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = removeGroups(filepath.Join(dir, e.Name()))
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
