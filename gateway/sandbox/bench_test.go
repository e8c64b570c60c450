package sandbox

import (
	"context"
	"os/exec"
	"slices"
	"testing"
)

// BenchmarkStart times a start of /bin/true to its end: alone, in a
// sandbox with the host's network, and in one with a network of its own
// (as the egress proxy's sandboxes have, less the helper that opens the
// proxy's socket). The differences are what bubblewrap's namespaces and
// mounts cost a start (docs/BENCHMARKS.md).
func BenchmarkStart(b *testing.B) {
	sb, err := New(context.Background(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	spec := Spec{Command: []string{"/bin/true"}, Workspace: b.TempDir(), Home: b.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}}
	argv, env, err := sb.Command(spec)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"alone", spec.Command},
		{"bwrap", argv},
		{"bwrap-own-network", slices.Insert(slices.Clone(argv), 1, "--unshare-net")},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %v\n%s", c.argv, err, out)
				}
			}
		})
	}
}
