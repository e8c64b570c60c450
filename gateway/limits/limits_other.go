//go:build !linux

package limits

import (
	"fmt"
	"log/slog"
	"runtime"
)

// Controller makes a group for each agent. Off Linux it enforces nothing,
// and [Setup] makes one only for the zero Limits.
type Controller struct {
	// Log is unused off Linux; it is here so that callers set it as they
	// do on Linux.
	Log *slog.Logger
}

// Setup returns the Controller of the zero Limits; any limit set is an
// error wrapping ErrUnsupported that names the flags to set to 0, so that
// a gateway off Linux never silently drops a limit the operator asked
// for.
func Setup(l Limits) (*Controller, error) {
	if l != (Limits{}) {
		return nil, fmt.Errorf("%w, and this gateway runs on %s (%s asked for): set --agent-memory, --agent-pids, --agent-cpu, --agent-open-files and --agent-file-size to 0 to run agents without them",
			ErrUnsupported, runtime.GOOS, l)
	}
	return &Controller{}, nil
}

// Limits returns what the Controller enforces: nothing.
func (c *Controller) Limits() Limits { return Limits{} }

// Describe says what is enforced, for the start-up log.
func (c *Controller) Describe() string { return "none (" + runtime.GOOS + " has no per-agent limits)" }

// Reaped returns nothing: there are no cgroups to reap off Linux.
func (c *Controller) Reaped() []Reaped { return nil }

// Close releases nothing.
func (c *Controller) Close() {}

// Group is one agent's group; off Linux it holds nothing.
type Group struct{}

// New returns an empty group: the agent's process group is all there is.
func (c *Controller) New(string) (*Group, error) { return &Group{}, nil }

// Place does nothing: no limit is set.
func (g *Group) Place(int) error { return nil }

// Kill does nothing: the agent package kills the agent's process group.
func (g *Group) Kill() {}

// OOMKilled reports false: no memory limit is set.
func (g *Group) OOMKilled() bool { return false }

// Freeze returns ErrNoFreezer: the agent package stops the processes with
// signals.
func (g *Group) Freeze() error { return ErrNoFreezer }

// Thaw returns ErrNoFreezer, as Freeze does.
func (g *Group) Thaw() error { return ErrNoFreezer }

// Close does nothing.
func (g *Group) Close() {}
