//go:build linux

package limits

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkStart times a start of a shell to its end, alone and under the
// default limits: its group made, the shell, held until then as
// gateway/agent holds an agent, placed in it, let go, and the group
// removed once it ended. The difference is what the cgroups cost a start
// (docs/BENCHMARKS.md).
func BenchmarkStart(b *testing.B) {
	c, err := Setup(Defaults)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for _, limited := range []bool{false, true} {
		name := "alone"
		if limited {
			name = "limits"
		}
		b.Run(name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				var g *Group
				if limited {
					n++
					if g, err = c.New(fmt.Sprintf("bench-%d-%d", os.Getpid(), n)); err != nil {
						b.Fatal(err)
					}
				}
				if err := startHeld(g); err != nil {
					if g != nil {
						g.Close()
					}
					b.Fatal(err)
				}
				if g != nil {
					if err := g.close(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// startHeld starts a shell that waits for a line on its stdin, places it
// in g (when not nil), sends the line and waits for the shell's end.
func startHeld(g *Group) error {
	cmd := exec.Command("/bin/sh", "-c", "read -r _")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if g != nil {
		if err := g.Place(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return err
		}
	}
	_, err = in.Write([]byte("go\n"))
	in.Close()
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	return err
}
