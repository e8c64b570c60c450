//go:build linux

package sandbox

// Supported returns nil: bubblewrap's namespaces are Linux's.
func Supported() error { return nil }
