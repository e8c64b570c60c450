// Package workspace decides where each user's sessions work: every user has
// a directory of their own under one root, ROOT/NAME (see [Name]), where
// the gateway makes a fresh directory for a session created without a cwd,
// and inside which a client's cwd must lie when the gateway confines it.
//
// Paths are checked after resolving their symbolic links, and the resolved
// path is what a session keeps, so that swapping a symlink later cannot
// move a session that was checked.
package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOutside is the error of [Root.Resolve] for a cwd that is not a
// directory in the user's directory, whatever the reason: it does not
// exist, it is elsewhere, a symlink leads out, it is a file. The reasons
// are not told apart, so that nobody learns from it what exists outside
// their own directory.
var ErrOutside = errors.New("the cwd is not a directory in your workspace")

// maxName is the longest file name most file systems take (NAME_MAX).
const maxName = 255

// Name returns the name of user's directory under a root.
//
// A user name made only of ASCII letters, digits, `.`, `@` and `-` (that
// is, of [A-Za-z0-9.@-]) that does not start with `.` or `-` is kept as it
// is: alice, bob@example.com, ci-bot. Any other name, the empty one (the
// local user of a gateway without authentication) included, becomes `_`
// followed by the lowercase hex of its bytes: "" is "_", "../x" is "_2e2e2f78", "a_b" is
// "_615f62". Kept names never contain `_` and encoded ones always start
// with it, so two different users never get the same name, and no name is
// `.`, `..` or holds a `/`, so none leads out of the root. A name that
// would be longer than 255 bytes becomes `__` followed by the hex of the
// user name's SHA-256.
//
// On a case-insensitive file system (macOS's default) Alice and alice
// would share a directory; the gateway's workspaces are meant for Linux
// file systems, which tell them apart.
func Name(user string) string {
	name := user
	if !plain(user, false) {
		name = "_" + hex.EncodeToString([]byte(user))
	}
	if len(name) > maxName {
		sum := sha256.Sum256([]byte(user))
		name = "__" + hex.EncodeToString(sum[:])
	}
	return name
}

// plain reports whether s is not empty, made of [A-Za-z0-9.@-] (and `_`
// when underscore is set), and does not start with `.` or `-`: a user name
// Name keeps as it is, or (with `_`) a session id that names a directory.
func plain(s string, underscore bool) bool {
	if s == "" || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '@', c == '-':
		case c == '_' && underscore:
		default:
			return false
		}
	}
	return true
}

// Root is a directory holding one directory per user. Its methods are safe
// for concurrent use.
type Root struct {
	dir   string // absolute, symlinks resolved
	local bool
}

// New returns the root DIR of many users' directories, DIR/NAME for each
// user (see [Name]). DIR is made (mode 0700) when missing; its symlinks
// are resolved once, here.
func New(dir string) (*Root, error) {
	return newRoot(dir, false)
}

// NewLocal returns the root DIR of a gateway without authentication, whose
// one user (the empty user, the person running the gateway) has DIR itself
// as their directory: sessions made for them are DIR/SESSION_ID, and their
// cwd must be in DIR. Any other user has no directory: [Root.Resolve]
// refuses them and [Root.UserDir] fails. DIR is made (mode 0700) when
// missing.
func NewLocal(dir string) (*Root, error) {
	return newRoot(dir, true)
}

func newRoot(dir string, local bool) (*Root, error) {
	if dir == "" {
		return nil, errors.New("workspace root: no directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if fi, err := os.Stat(resolved); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("workspace root %s is not a directory", dir)
	}
	return &Root{dir: resolved, local: local}, nil
}

// Dir returns the root directory, absolute, its symlinks resolved.
func (r *Root) Dir() string { return r.dir }

// Local reports whether the root is a single local user's (see [NewLocal]).
func (r *Root) Local() bool { return r.local }

// path returns the path of user's directory, made or not.
func (r *Root) path(user string) (string, error) {
	if r.local {
		if user != "" {
			return "", fmt.Errorf("workspace root %s is the local user's; user %q has no directory in it", r.dir, user)
		}
		return r.dir, nil
	}
	return filepath.Join(r.dir, Name(user)), nil
}

// UserDir returns user's directory, making it (mode 0700) when missing. An
// existing entry of that name that is a symlink or not a directory is
// refused.
func (r *Root) UserDir(user string) (string, error) {
	dir, err := r.path(user)
	if err != nil {
		return "", err
	}
	if dir == r.dir {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("making the user's workspace: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("the user's workspace: %w", err)
	}
	if !fi.IsDir() { // a symlink is not a directory to Lstat
		return "", fmt.Errorf("the user's workspace %s is not a directory (%v); move it away", dir, fi.Mode().Type())
	}
	return dir, nil
}

// Resolve checks a client's cwd for user: it must be an absolute path
// that, its symlinks resolved, is user's directory or a directory inside
// it. It returns the resolved path, which the session keeps. On any
// failure the error is an [ErrOutside] whose message is the same for every
// cwd of a user, whether or not the path exists.
func (r *Root) Resolve(user, cwd string) (string, error) {
	dir, err := r.path(user)
	if err != nil {
		return "", r.outside("")
	}
	if !filepath.IsAbs(cwd) {
		return "", r.outside(dir)
	}
	resolved, err := filepath.EvalSymlinks(cwd)
	if err != nil || !within(dir, resolved) {
		return "", r.outside(dir)
	}
	fi, err := os.Stat(resolved)
	if err != nil || !fi.IsDir() {
		return "", r.outside(dir)
	}
	return resolved, nil
}

// outside is Resolve's error for a user whose directory is dir ("": none).
func (r *Root) outside(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: this gateway has none for you", ErrOutside)
	}
	return fmt.Errorf("%w %s: give a directory in it, or an empty cwd for a new one", ErrOutside, dir)
}

// within reports whether the clean absolute path p is dir or inside it,
// comparing whole path components: /w/alice2 is not inside /w/alice.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	if err != nil || filepath.IsAbs(rel) {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// Fresh makes a new directory (mode 0700) for user's session sessionID,
// USER_DIR/SESSION_ID, and returns its path. sessionID must be made of
// [A-Za-z0-9._@-] and not start with `.` or `-`; the directory must not
// exist yet.
func (r *Root) Fresh(user, sessionID string) (string, error) {
	if !plain(sessionID, true) || len(sessionID) > maxName {
		return "", fmt.Errorf("session id %q cannot name a directory", sessionID)
	}
	dir, err := r.UserDir(user)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, sessionID)
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", fmt.Errorf("making the session's workspace: %w", err)
	}
	return p, nil
}

// OpenDir opens the directory at path for use (O_PATH on Linux; read-only
// on darwin, which has no O_PATH), following symbolic links, for an agent
// whose cwd is not confined.
func OpenDir(path string) (*os.File, error) {
	fd, err := openDir(path, false)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Open opens dir, a directory of user's that Resolve or Fresh returned,
// for use (O_PATH on Linux): from the user's directory, with no symbolic link
// followed on the way, so that a link an agent swapped in for a part of
// the path since it was checked cannot lead elsewhere. A directory that
// is no longer there as it was is an ErrOutside.
func (r *Root) Open(user, dir string) (*os.File, error) {
	ud, err := r.path(user)
	if err != nil {
		return nil, r.outside("")
	}
	rel, err := filepath.Rel(ud, dir)
	if err != nil || !within(ud, dir) {
		return nil, r.outside(ud)
	}
	base, err := openDir(ud, true)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", r.outside(ud), err)
	}
	if rel == "." {
		return os.NewFile(uintptr(base), dir), nil
	}
	defer unix.Close(base)
	fd, err := openBeneath(base, rel)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", r.outside(ud), err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}
