package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// layout is a host with a workspace, a home, a directory given read-only
// that also holds the gateway's secrets, and a directory given writable.
type layout struct {
	workspace, home, shared, rw, tokens, store string
	// other is a file in the host's /tmp, beside the layout.
	other string
	sb    *Sandbox
}

func newLayout(t *testing.T) layout {
	t.Helper()
	testutil.Needs(t, "bwrap")
	root := t.TempDir()
	l := layout{
		workspace: filepath.Join(root, "ws"),
		home:      filepath.Join(root, "home"),
		shared:    filepath.Join(root, "shared"),
		rw:        filepath.Join(root, "cache"),
	}
	// The operator gave a directory that holds the gateway's state.
	l.tokens = filepath.Join(l.shared, "secret", "tokens")
	l.store = filepath.Join(l.shared, "sessions.db")
	for _, d := range []string{l.workspace, l.home, filepath.Dir(l.tokens), l.rw} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{
		l.tokens: "s3cret-token alice\n", l.store: "bolt data",
		filepath.Join(l.shared, "tool.txt"):   "a shared tool",
		filepath.Join(l.workspace, "main.go"): "package main",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other, err := os.CreateTemp("", "host-tmp-file")
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	l.other = other.Name()
	t.Cleanup(func() { os.Remove(l.other) })
	sb, err := New(context.Background(), Options{ReadOnly: []string{l.shared}, ReadWrite: []string{l.rw}, Hide: []string{l.tokens, l.store}})
	if err != nil {
		t.Fatal(err)
	}
	l.sb = sb
	return l
}

// run runs script with /bin/sh -c in the sandbox and returns its output,
// failing the test when the shell fails.
func (l layout) run(t *testing.T, script string) string {
	t.Helper()
	argv, env, err := l.sb.Command(Spec{Command: []string{"/bin/sh", "-c", script}, Workspace: l.workspace, Home: l.home, Env: []string{"PATH=/usr/bin:/bin", "HOME=/root", "SECRET_OF_GATEWAY=x"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

func TestSandboxShowsOnlyWhatItIsGiven(t *testing.T) {
	l := newLayout(t)
	for _, c := range []struct{ script, want string }{
		// Its workspace, writable, and its current directory.
		{"pwd; cat main.go; echo new > made.txt && echo wrote", l.workspace + "\npackage main" + "wrote\n"},
		{"echo $HOME $TMPDIR; echo login > $HOME/.cred && echo ok", l.home + " /tmp\nok\n"},
		// The shared directory, read-only; the writable one, writable.
		{"cat " + l.shared + "/tool.txt; (echo x > " + l.shared + "/new) 2>/dev/null || echo read-only", "a shared tool" + "read-only\n"},
		{"echo x > " + l.rw + "/c && echo rw", "rw\n"},
		// The gateway's files are hidden even there.
		{"cat " + l.tokens + " 2>/dev/null || echo no-tokens; ls " + filepath.Dir(l.tokens) + " | wc -l", "no-tokens\n0\n"},
		{"cat " + l.store + " 2>/dev/null || echo no-store", "no-store\n"},
		// No capabilities, no_new_privs, its own pid namespace.
		{"grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | tr -s '\\t ' ' '", "CapEff: 0000000000000000\nNoNewPrivs: 1\n"},
		{"test $(ls /proc | grep -c '^[0-9]') -lt 10 && echo few", "few\n"},
		{"test -e /proc/" + strconv.Itoa(os.Getpid()) + " || echo hidden", "hidden\n"},
		{"unshare -U true 2>/dev/null || echo no-user-namespace", "no-user-namespace\n"},
		// Nothing else of the host.
		{"ls /home /root /var /run /sys 2>&1 | grep -c 'No such file'", "5\n"},
		// /tmp is its own: the host's files there are not.
		{"test -e " + l.other + " || echo private-tmp", "private-tmp\n"},
		{"echo ${SECRET_OF_GATEWAY:-unset}", "x\n"}, // the env is the caller's to choose
	} {
		if got := l.run(t, c.script); got != c.want {
			t.Errorf("%s:\ngot  %q\nwant %q", c.script, got, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(l.workspace, "made.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("the workspace write did not reach the host: %q, %v", b, err)
	}
	if b, err := os.ReadFile(l.tokens); err != nil || !strings.Contains(string(b), "s3cret") {
		t.Errorf("the hidden file itself changed: %q, %v", b, err)
	}
}

func TestHiddenFileStaysHiddenAfterARename(t *testing.T) {
	l := newLayout(t)
	// A token file replaced by a rename, as editors and Kubernetes do.
	tmp := l.tokens + ".new"
	if err := os.WriteFile(tmp, []byte("rotated alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.tokens); err != nil {
		t.Fatal(err)
	}
	if got := l.run(t, "cat "+l.tokens+" 2>/dev/null || echo hidden"); got != "hidden\n" {
		t.Errorf("got %q", got)
	}
}

func TestHideWhereTheDirectoryHoldsAMount(t *testing.T) {
	// The store's directory holds the workspace: the store file alone is
	// covered, and the workspace stays.
	got := hide("/x/sessions.db", []string{"/x/ws/alice"})
	if strings.Join(got, " ") != "--ro-bind-try /dev/null /x/sessions.db" {
		t.Errorf("got %q", got)
	}
	if got := hide("/x/secret/tokens", nil); strings.Join(got, " ") != "--tmpfs /x/secret" {
		t.Errorf("got %q", got)
	}
	if got := hide("/etc/tokens", nil); strings.Join(got, " ") != "--ro-bind-try /dev/null /etc/tokens" {
		t.Errorf("a file right in /etc: got %q", got)
	}
	if got := shownAt("/srv/tokens", []bind{{"/x", "/x"}}); got != nil {
		t.Errorf("a file not visible anyway shows at %q", got)
	}
}

// TestHiddenBehindLinks: a hidden file reached through links, and a
// directory given through one, as Kubernetes lays out a Secret (tokens ->
// ..data/tokens -> ..2026_11_26/tokens), stay hidden.
func TestHiddenBehindLinks(t *testing.T) {
	testutil.Needs(t, "bwrap")
	root := t.TempDir()
	real := filepath.Join(root, "srv", "..2026_11_26")
	if err := os.MkdirAll(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "tokens"), []byte("TOKEN alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "srv", "tool.txt"), []byte("tool\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(root, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(secrets, "tokens") // a link into srv
	if err := os.Symlink(filepath.Join(real, "tokens"), hidden); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(root, "data") // srv, given through a link
	if err := os.Symlink(filepath.Join(root, "srv"), data); err != nil {
		t.Fatal(err)
	}
	ws, home := filepath.Join(root, "ws"), filepath.Join(root, "home")
	for _, d := range []string{ws, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, given := range []string{filepath.Join(root, "srv"), data} {
		sb, err := New(context.Background(), Options{ReadOnly: []string{given}, Hide: []string{hidden}})
		if err != nil {
			t.Fatal(err)
		}
		script := "cat " + given + "/tool.txt; cat " + given + "/..2026_11_26/tokens 2>/dev/null || echo hidden"
		argv, env, err := sb.Command(Spec{Command: []string{"/bin/sh", "-c", script}, Workspace: ws, Home: home, Env: []string{"PATH=/usr/bin:/bin"}})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "tool\nhidden\n" {
			t.Errorf("given %s: %q, %v", given, out, err)
		}
	}
}

func TestCommandNeedsAbsolutePaths(t *testing.T) {
	l := newLayout(t)
	for _, s := range []Spec{
		{Command: []string{"sh"}, Workspace: l.workspace, Home: l.home},
		{Command: []string{"/bin/sh"}, Workspace: "ws", Home: l.home},
		{Command: nil, Workspace: l.workspace, Home: l.home},
	} {
		if _, _, err := l.sb.Command(s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

func TestNewNamesTheFix(t *testing.T) {
	_, err := New(context.Background(), Options{Bwrap: "/nonexistent/bwrap"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install bubblewrap") || !strings.Contains(err.Error(), "--sandbox none") {
		t.Errorf("got %v", err)
	}
	// A bwrap that fails, as one without user namespaces does.
	fake := filepath.Join(t.TempDir(), "bwrap")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Options{Bwrap: fake})
	if err == nil || !strings.Contains(err.Error(), "No permissions to create new namespace") || !strings.Contains(err.Error(), "user namespaces") {
		t.Errorf("got %v", err)
	}
}

func TestProgramBehindALinkRuns(t *testing.T) {
	l := newLayout(t)
	// A program in a directory the sandbox does not show, reached through
	// a link in another.
	real := filepath.Join(t.TempDir(), "opt", "tool")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("#!/bin/sh\necho tool-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "bin", "tool")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	argv, env, err := l.sb.Command(Spec{Command: []string{link}, Workspace: l.workspace, Home: l.home, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "tool-ran\n" {
		t.Errorf("%q, %v", out, err)
	}
}
