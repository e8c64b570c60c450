package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNameKeepsPlainNamesAndEncodesTheRest(t *testing.T) {
	for user, want := range map[string]string{
		"alice":           "alice",
		"bob@example.com": "bob@example.com",
		"ci-bot.2":        "ci-bot.2",
		"":                "_",
		".":               "_2e",
		"..":              "_2e2e",
		"../x":            "_2e2e2f78",
		"a/b":             "_612f62",
		"a_b":             "_615f62",
		"_":               "_5f",
		"_61":             "_5f3631",
		".hidden":         "_2e68696464656e",
		"-rf":             "_2d7266",
		"a|b":             "_617c62",
		"é":               "_c3a9",
		"a b":             "_612062",
	} {
		if got := Name(user); got != want {
			t.Errorf("Name(%q) = %q, want %q", user, got, want)
		}
	}
}

func TestNamesAreDistinctAndSafe(t *testing.T) {
	users := []string{"", ".", "..", "../x", "..%2f", "a/b", "a\\b", "a", "A", "_", "_61", "a_", "61", "_2e2e",
		"/", "x/../..", "ünï", "日本", "a\x00b", "-", "-a", "a-", "@", strings.Repeat("x", 255), strings.Repeat("x", 256),
		strings.Repeat("é", 200), strings.Repeat("é", 201), "__" + strings.Repeat("0", 64)}
	seen := map[string]string{}
	for _, u := range users {
		n := Name(u)
		if other, dup := seen[n]; dup {
			t.Errorf("Name(%q) = Name(%q) = %q", u, other, n)
		}
		seen[n] = u
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\\\x00") || len(n) > 255 {
			t.Errorf("Name(%q) = %q: not a safe file name", u, n)
		}
		if filepath.Base(n) != n || filepath.Clean(n) != n {
			t.Errorf("Name(%q) = %q is not one path component", u, n)
		}
	}
}

// fixture is a root with alice's and bob's directories, alice's project,
// and a symlink in alice's directory to bob's.
type fixture struct {
	root                *Root
	alice, bob, outside string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	r, err := New(filepath.Join(base, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{root: r, outside: filepath.Join(base, "elsewhere")}
	for _, u := range []string{"alice", "bob", "alice2"} {
		d, err := r.UserDir(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d, "proj"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.alice, f.bob = filepath.Join(r.Dir(), "alice"), filepath.Join(r.Dir(), "bob")
	if err := os.Mkdir(f.outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.bob, filepath.Join(f.alice, "to-bob")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.alice, "to-elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.alice, "proj"), filepath.Join(f.alice, "to-proj")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.alice, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestResolveConfinesToTheUsersDirectory(t *testing.T) {
	f := newFixture(t)
	ok := map[string]string{
		f.alice:                                         f.alice,
		f.alice + "/":                                   f.alice,
		filepath.Join(f.alice, "proj"):                  filepath.Join(f.alice, "proj"),
		f.alice + "/proj/../proj":                       filepath.Join(f.alice, "proj"),
		filepath.Join(f.alice, "to-proj"):               filepath.Join(f.alice, "proj"),
		f.root.Dir() + "/bob/../alice/proj":             filepath.Join(f.alice, "proj"),
		f.root.Dir() + "/alice/./proj//":                filepath.Join(f.alice, "proj"),
		filepath.Join(f.alice, "to-proj", "..", "proj"): filepath.Join(f.alice, "proj"),
	}
	for cwd, want := range ok {
		got, err := f.root.Resolve("alice", cwd)
		if err != nil || got != want {
			t.Errorf("Resolve(alice, %q) = %q, %v; want %q", cwd, got, err, want)
		}
	}

	var want string
	for _, cwd := range []string{
		"/",
		f.root.Dir(),
		f.bob,
		filepath.Join(f.bob, "proj"),
		f.alice + "/../bob",
		f.alice + "/../bob/proj",
		f.alice + "/..",
		f.alice + "/../alice2",                // a prefix sibling
		filepath.Join(f.root.Dir(), "alice2"), // the same, directly
		filepath.Join(f.root.Dir(), "alice2/proj"),
		filepath.Join(f.alice, "to-bob"),         // a symlink to another user's directory
		filepath.Join(f.alice, "to-bob", "proj"), // through it
		filepath.Join(f.alice, "to-elsewhere"),
		filepath.Join(f.alice, "file"),    // not a directory
		filepath.Join(f.alice, "missing"), // does not exist
		filepath.Join(f.bob, "missing"),   // does not exist, in bob's area
		filepath.Join(f.alice, "file", "x"),
		f.outside,
		"relative/path",
		"proj",
		"",
	} {
		got, err := f.root.Resolve("alice", cwd)
		if !errors.Is(err, ErrOutside) {
			t.Errorf("Resolve(alice, %q) = %q, %v; want ErrOutside", cwd, got, err)
			continue
		}
		// The same message for every refused cwd, existing or not.
		if want == "" {
			want = err.Error()
		} else if err.Error() != want {
			t.Errorf("Resolve(alice, %q): %q, unlike the others' %q", cwd, err, want)
		}
	}
}

func TestResolveForAUserWithoutADirectory(t *testing.T) {
	f := newFixture(t)
	// carol has no directory yet: nothing is hers, not even its path.
	for _, cwd := range []string{filepath.Join(f.root.Dir(), "carol"), f.alice, "/"} {
		if _, err := f.root.Resolve("carol", cwd); !errors.Is(err, ErrOutside) {
			t.Errorf("Resolve(carol, %q): %v, want ErrOutside", cwd, err)
		}
	}
	// The empty user of a many-user root is "_", not the root.
	if _, err := f.root.Resolve("", f.root.Dir()); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve(\"\", root): %v, want ErrOutside", err)
	}
	// A user named like a path does not reach it.
	for _, u := range []string{"../alice", "alice/..", ".", ".."} {
		if _, err := f.root.Resolve(u, f.alice); !errors.Is(err, ErrOutside) {
			t.Errorf("Resolve(%q, alice's dir): %v, want ErrOutside", u, err)
		}
	}
}

func TestUserDirRefusesSymlinksAndFiles(t *testing.T) {
	f := newFixture(t)
	if err := os.Symlink(f.bob, filepath.Join(f.root.Dir(), "mallory")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.root.UserDir("mallory"); err == nil {
		t.Error("UserDir of a symlink: no error")
	}
	if err := os.WriteFile(filepath.Join(f.root.Dir(), "eve"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.root.UserDir("eve"); err == nil {
		t.Error("UserDir of a file: no error")
	}
	// A symlinked user directory confines nothing to its target.
	if _, err := f.root.Resolve("mallory", f.bob); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve through mallory's symlink: %v, want ErrOutside", err)
	}
	d, err := f.root.UserDir("../x")
	if err != nil || d != filepath.Join(f.root.Dir(), "_2e2e2f78") {
		t.Fatalf("UserDir(../x) = %q, %v", d, err)
	}
	if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("UserDir made %v, %v; want a 0700 directory", fi, err)
	}
}

func TestFresh(t *testing.T) {
	f := newFixture(t)
	p, err := f.root.Fresh("carol", "s_0123abcd")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(f.root.Dir(), "carol", "s_0123abcd"); p != want {
		t.Fatalf("Fresh = %q, want %q", p, want)
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("Fresh made %v, %v", fi, err)
	}
	if got, err := f.root.Resolve("carol", p); err != nil || got != p {
		t.Errorf("Resolve(carol, fresh) = %q, %v", got, err)
	}
	if _, err := f.root.Fresh("carol", "s_0123abcd"); err == nil {
		t.Error("Fresh twice with one id: no error")
	}
	for _, id := range []string{"", ".", "..", "../x", "a/b", "-x", ".x"} {
		if _, err := f.root.Fresh("carol", id); err == nil {
			t.Errorf("Fresh(carol, %q): no error", id)
		}
	}
}

func TestLocalRootIsTheLocalUsersDirectory(t *testing.T) {
	base := t.TempDir()
	r, err := NewLocal(filepath.Join(base, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("root %v, %v", fi, err)
	}
	if d, err := r.UserDir(""); err != nil || d != r.Dir() {
		t.Fatalf("UserDir(local) = %q, %v; want the root", d, err)
	}
	p, err := r.Fresh("", "s_1")
	if err != nil || p != filepath.Join(r.Dir(), "s_1") {
		t.Fatalf("Fresh(local) = %q, %v", p, err)
	}
	for cwd, ok := range map[string]bool{r.Dir(): true, p: true, base: false, "/": false} {
		if _, err := r.Resolve("", cwd); (err == nil) != ok {
			t.Errorf("Resolve(local, %q): %v", cwd, err)
		}
	}
	if _, err := r.Resolve("alice", p); !errors.Is(err, ErrOutside) {
		t.Errorf("Resolve(alice) in a local root: %v, want ErrOutside", err)
	}
	if _, err := r.UserDir("alice"); err == nil {
		t.Error("UserDir(alice) in a local root: no error")
	}
}

func TestNewResolvesTheRoot(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	r, err := New(link)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(real); r.Dir() != want {
		t.Fatalf("Dir() = %q, want %q", r.Dir(), want)
	}
	d, err := r.UserDir("alice")
	if err != nil {
		t.Fatal(err)
	}
	// A cwd given through the root's symlink resolves inside.
	if got, err := r.Resolve("alice", filepath.Join(link, "alice")); err != nil || got != d {
		t.Errorf("Resolve through the root's link = %q, %v; want %q", got, err, d)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(file); err == nil {
		t.Error("New(a file): no error")
	}
	if _, err := New(""); err == nil {
		t.Error("New(\"\"): no error")
	}
}
