//go:build !linux

package agent

// awaitExit returns at once: there is no pidfd off Linux, and the caller's
// Wait blocks until the agent exits.
func awaitExit(int) {}
