//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"
)

// Supported returns an error wrapping ErrUnsupported: bubblewrap needs
// Linux's namespaces, which this platform lacks.
func Supported() error {
	return fmt.Errorf("%w, and this gateway runs on %s", ErrUnsupported, runtime.GOOS)
}
