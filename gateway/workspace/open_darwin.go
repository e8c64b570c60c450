//go:build darwin

package workspace

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openDir opens the directory at path read-only (darwin has no O_PATH).
// With nofollow, path itself may not be a symbolic link.
func openDir(path string, nofollow bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if nofollow {
		flags |= unix.O_NOFOLLOW
	}
	return unix.Open(path, flags, 0)
}

// openBeneath opens the directory rel, a clean relative path, from the
// directory base with O_NOFOLLOW_ANY (macOS 11 and later): no symbolic
// link is followed anywhere on the way, so a path with no `..` part
// cannot lead outside base, as openat2's RESOLVE_BENEATH guarantees on
// Linux.
func openBeneath(base int, rel string) (int, error) {
	if filepath.IsAbs(rel) || rel != filepath.Clean(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return -1, unix.EXDEV
	}
	return unix.Openat(base, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW_ANY, 0)
}
