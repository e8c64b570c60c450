//go:build linux

package workspace

import "golang.org/x/sys/unix"

// openDir opens the directory at path with O_PATH: for use as a
// descriptor, not for reading. With nofollow, path itself may not be a
// symbolic link.
func openDir(path string, nofollow bool) (int, error) {
	flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	if nofollow {
		flags |= unix.O_NOFOLLOW
	}
	return unix.Open(path, flags, 0)
}

// openBeneath opens the directory rel, a relative path, from the
// directory base, with openat2(2): no symbolic link followed on the way,
// and nothing outside base reached.
func openBeneath(base int, rel string) (int, error) {
	return unix.Openat2(base, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
