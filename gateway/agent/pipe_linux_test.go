//go:build linux

package agent

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

// An agent's output goes through a pipe of pipeBytes, so that a burst does
// not wait for the gateway to be scheduled (see growPipe).
func TestAgentOutputPipeIsLarge(t *testing.T) {
	t.Parallel()
	a, _ := startAgent(t, agentsim.Script{}, 0)
	rc, err := a.out.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	if err := rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil {
		t.Fatal(err)
	}
	if err != nil || size < pipeBytes {
		t.Fatalf("the agent's output pipe holds %d bytes (%v), want %d", size, err, pipeBytes)
	}
}
