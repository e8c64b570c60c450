// Package sandbox confines agent processes with bubblewrap (bwrap), as
// Flatpak and Claude Code do: each agent gets its own user, mount, pid, ipc
// and uts namespaces (and may make no user namespace of its own), no
// capabilities and no_new_privs, a new session, the
// system read-only, its session's workspace read-write, a private /tmp, a
// HOME of its own user's, and nothing of the gateway's: its token, OIDC,
// config and store files are hidden, and no process of the gateway or of
// another session can be seen.
//
// The sandbox is built from an allowlist: only the system directories, the
// agent's executable, the paths the operator adds, the workspace and the
// home are mounted. Everything else of the host (other users' workspaces
// and homes, /home, /root, /var, /run, /sys) is simply not there.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Modes of [Options.Mode], as `--sandbox` names them.
const (
	// ModeNone runs agents unconfined, as the gateway's own user.
	ModeNone = "none"
	// ModeBwrap runs each agent in a bubblewrap sandbox.
	ModeBwrap = "bwrap"
)

// systemDirs are mounted read-only (or re-made as the same symbolic link,
// where the host merged them into /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// Options configure a [Sandbox].
type Options struct {
	// Bwrap is the bubblewrap program; empty looks up "bwrap" on PATH.
	Bwrap string
	// ReadOnly and ReadWrite are host paths every agent sees at the same
	// path, read-only or writable (an agent's install directory, a shared
	// cache).
	ReadOnly, ReadWrite []string
	// Hide are the gateway's own files (token, OIDC, config and store
	// files, keys): an agent never sees them, even where they lie in a
	// directory it is given.
	Hide []string
}

// Sandbox builds bubblewrap command lines. It is safe for concurrent use.
type Sandbox struct {
	bwrap string
	opts  Options
	// system is the part of every command line that lays out the system.
	system []string
}

// ErrUnsupported is wrapped by the error of [Supported] and [New] on a
// platform other than Linux, where no agent can be sandboxed.
var ErrUnsupported = errors.New("bubblewrap sandboxes need Linux")

// New checks the options and that bubblewrap works on this host: it runs a
// sandbox once, and returns an error that names the fix when that fails.
// Off Linux it fails at once (see [Supported]).
func New(ctx context.Context, opts Options) (*Sandbox, error) {
	if err := Supported(); err != nil {
		return nil, fmt.Errorf("%w: pass --sandbox none to run agents unconfined, as the gateway's own user", err)
	}
	bwrap := opts.Bwrap
	if bwrap == "" {
		bwrap = "bwrap"
	}
	path, err := exec.LookPath(bwrap)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap (%s) is not installed: install it (Debian: apt-get install bubblewrap), or pass --sandbox none to run agents unconfined", bwrap)
	}
	for _, list := range [][]string{opts.ReadOnly, opts.ReadWrite, opts.Hide} {
		for _, p := range list {
			if !filepath.IsAbs(p) {
				return nil, fmt.Errorf("sandbox path %q is not absolute", p)
			}
		}
	}
	for _, p := range slices.Concat(opts.ReadOnly, opts.ReadWrite) {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox path: %w", err)
		}
	}
	s := &Sandbox{bwrap: path, opts: opts, system: systemArgs()}
	if err := s.probe(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Program is the path of the bubblewrap program.
func (s *Sandbox) Program() string { return s.bwrap }

// systemArgs lays out the system directories read-only.
func systemArgs() []string {
	var args []string
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	// A resolv.conf that links out of /etc (systemd-resolved's, under
	// /run) is given its target, read-only.
	if target, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !under(target, "/etc") && !under(target, "/usr") {
		args = append(args, "--ro-bind-try", target, target)
	}
	return args
}

// namespaces are the sandbox's own namespaces and process rules. The
// network namespace is the host's, for the agent's model API.
var namespaces = []string{
	"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	// No user namespaces of the agent's own: most kernel exploits an
	// unprivileged process can reach start by making one.
	"--disable-userns",
	"--die-with-parent", "--new-session", "--cap-drop", "ALL",
	"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
}

// probe runs a sandbox with the system laid out, to learn at start-up
// rather than at the first session that bubblewrap cannot run here.
func (s *Sandbox) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := slices.Concat(s.system, namespaces, []string{"--", "/bin/sh", "-c", "exit 0"})
	cmd := exec.CommandContext(ctx, s.bwrap, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		why := strings.TrimSpace(stderr.String())
		if why == "" {
			why = err.Error()
		}
		if i := strings.IndexByte(why, '\n'); i >= 0 {
			why = why[:i]
		}
		return fmt.Errorf("bubblewrap does not work on this host (%s): allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, and kernel.apparmor_restrict_unprivileged_userns=0 where AppArmor restricts them) and a /proc it may mount (in a container: seccomp and AppArmor unconfined and an unmasked /proc, as deploy/README.md says), or pass --sandbox none to run agents unconfined", why)
	}
	return nil
}

// Spec is one agent to confine.
type Spec struct {
	// Command is the agent's program and arguments. Its program must be
	// an absolute path.
	Command []string
	// Workspace is the session's working directory: writable, and the
	// agent's current directory.
	Workspace string
	// Home is the agent's HOME, writable; it must exist.
	Home string
	// Env is the agent's environment; HOME and TMPDIR are set by the
	// sandbox.
	Env []string
	// WorkspaceFD, when positive, is a descriptor of Workspace that the
	// agent's process inherits at this number: the sandbox binds the
	// directory it names, which the gateway opened and checked, rather
	// than whatever the path leads to by then.
	WorkspaceFD int
	// Egress, when set, gives the agent a network namespace of its own,
	// whose only way out is the gateway's egress proxy (package egress).
	Egress *Egress
}

// Egress is how a sandbox reaches the egress proxy.
type Egress struct {
	// Helper is the gateway's executable, which opens the proxy's socket
	// in the sandbox (egress.ListenIfCommanded) and then runs the agent.
	Helper string
	// HandoffDir holds the socket the helper sends it to.
	HandoffDir string
	// ListenCommand, Socket and Env are egress.ListenCommand,
	// egress.HandoffSocket and egress.Env().
	ListenCommand, Socket string
	Env                   []string
}

// Where the egress helper and its handoff directory are in the sandbox.
const (
	egressHelper  = "/run/acp-gateway/egress-helper"
	egressHandoff = "/run/acp-gateway/egress"
)

// ErrSpec is wrapped by the errors of a Spec the sandbox cannot run.
var ErrSpec = errors.New("sandbox")

// Command returns the command line that runs spec.Command in a sandbox,
// and the environment to give it.
func (s *Sandbox) Command(spec Spec) (argv, env []string, err error) {
	if len(spec.Command) == 0 || !filepath.IsAbs(spec.Command[0]) {
		return nil, nil, fmt.Errorf("%w: the agent's program must be an absolute path, got %q", ErrSpec, spec.Command)
	}
	for _, p := range []string{spec.Workspace, spec.Home} {
		if !filepath.IsAbs(p) {
			return nil, nil, fmt.Errorf("%w: path %q is not absolute", ErrSpec, p)
		}
	}
	argv = append([]string{s.bwrap}, s.system...)
	argv = append(argv, namespaces...)
	// What shows where: each bind's source, its links resolved, and its
	// place in the sandbox, so that a hidden file is found wherever it
	// shows, whichever links lead to it.
	binds := []bind{}
	for _, d := range systemDirs {
		binds = append(binds, newBind(d, d))
	}
	for _, p := range s.opts.ReadOnly {
		argv = append(argv, "--ro-bind", p, p)
		binds = append(binds, newBind(p, p))
	}
	for _, p := range s.opts.ReadWrite {
		argv = append(argv, "--bind", p, p)
		binds = append(binds, newBind(p, p))
	}
	// Places in the sandbox that hold a mount of their own: a hidden file
	// beside one is covered alone, not with its directory.
	mounts := slices.Concat(s.opts.ReadOnly, s.opts.ReadWrite, []string{spec.Workspace, spec.Home})
	for _, d := range programDirs(spec.Command) {
		if !visible(d, binds) {
			argv = append(argv, "--ro-bind", d, d)
			binds = append(binds, newBind(d, d))
		}
		mounts = append(mounts, d)
	}
	if spec.WorkspaceFD > 0 {
		// The directory the gateway opened and checked: a link swapped
		// in for the path since cannot move the mount elsewhere.
		argv = append(argv, "--bind-fd", strconv.Itoa(spec.WorkspaceFD), spec.Workspace)
	} else {
		argv = append(argv, "--bind", spec.Workspace, spec.Workspace)
	}
	argv = append(argv, "--bind", spec.Home, spec.Home)
	binds = append(binds, newBind(spec.Workspace, spec.Workspace), newBind(spec.Home, spec.Home))
	for _, h := range s.opts.Hide {
		for _, at := range shownAt(h, binds) {
			argv = append(argv, hide(at, mounts)...)
		}
	}
	command := spec.Command
	if e := spec.Egress; e != nil {
		argv = append(argv, "--unshare-net", "--ro-bind", e.Helper, egressHelper, "--ro-bind", e.HandoffDir, egressHandoff)
		command = slices.Concat([]string{egressHelper, e.ListenCommand, egressHandoff + "/" + e.Socket, "--"}, command)
	}
	argv = append(argv, "--chdir", spec.Workspace, "--")
	argv = append(argv, command...)

	for _, kv := range spec.Env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HOME", "TMPDIR":
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
			if spec.Egress == nil {
				env = append(env, kv)
			}
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+spec.Home, "TMPDIR=/tmp")
	if spec.Egress != nil {
		env = append(env, spec.Egress.Env...)
	}
	return argv, env, nil
}

// programDirs are the directories of the agent's program and, where its
// first argument is a file (a script an interpreter such as node runs), of
// that file, each as named and as its symbolic links resolve (a node in
// /usr/local/bin may be a link into /opt): all visible, read-only.
func programDirs(command []string) []string {
	files := []string{command[0]}
	if len(command) > 1 && filepath.IsAbs(command[1]) {
		if fi, err := os.Stat(command[1]); err == nil && fi.Mode().IsRegular() {
			files = append(files, command[1])
		}
	}
	var dirs []string
	for _, f := range files {
		dirs = append(dirs, filepath.Dir(f))
		if real, err := filepath.EvalSymlinks(f); err == nil && filepath.Dir(real) != filepath.Dir(f) {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	return dirs
}

// bind is a host directory shown in the sandbox.
type bind struct {
	// src is the host directory, its links resolved; dest is where the
	// sandbox shows it.
	src, dest string
}

func newBind(src, dest string) bind {
	if real, err := filepath.EvalSymlinks(src); err == nil {
		src = real
	}
	return bind{src: filepath.Clean(src), dest: filepath.Clean(dest)}
}

// visible reports whether host directory dir shows in the sandbox.
func visible(dir string, binds []bind) bool {
	return len(shownAt(dir, binds)) > 0
}

// shownAt lists where host path p, its links resolved, shows in the
// sandbox.
func shownAt(p string, binds []bind) []string {
	real := filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		real = r
	}
	var at []string
	for _, b := range binds {
		if !under(real, b.src) {
			continue
		}
		rel, _ := filepath.Rel(b.src, real)
		if in := filepath.Join(b.dest, rel); !slices.Contains(at, in) {
			at = append(at, in)
		}
	}
	return at
}

// hide returns the arguments that hide path, a place in the sandbox where
// a hidden file shows (not a link: shownAt resolves them): its whole
// directory is covered with an empty tmpfs, so that a file replaced by a
// rename on the host stays hidden too, unless that directory is a system
// directory or holds a mount of the sandbox, in which case the file alone
// is covered with /dev/null (which the sandbox may not even open: device
// nodes do not work in its user namespace's mounts).
func hide(path string, mounts []string) []string {
	dir := filepath.Dir(path)
	whole := !slices.Contains(systemDirs, dir) && dir != "/"
	for _, m := range mounts {
		if under(m, dir) {
			whole = false
		}
	}
	if whole {
		return []string{"--tmpfs", dir}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return []string{"--tmpfs", path}
	}
	return []string{"--ro-bind-try", "/dev/null", path}
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
