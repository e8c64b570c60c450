package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	runGatewayIfCommanded()
	// The readers, waiters and pumps an agent starts must end with it.
	goleak.VerifyTestMain(m)
}

// gatewayEnv makes this test binary a stand-in gateway: it starts an agent
// that ignores the end of its input and its signals, writes the agent's
// pid, and waits to be killed.
const gatewayEnv = "ACP_GATEWAY_TEST_STAND_IN_GATEWAY"

func runGatewayIfCommanded() {
	if os.Getenv(gatewayEnv) == "" {
		return
	}
	cmd, err := agentsim.Command(agentsim.Script{IgnoreEOF: true})
	if err == nil {
		var a *Agent
		if a, err = Start(context.Background(), Config{Command: cmd, Dir: os.TempDir(), Client: &recorder{}, StartTimeout: 30 * time.Second}); err == nil {
			fmt.Println(a.cmd.Process.Pid)
			select {}
		}
	}
	fmt.Fprintln(os.Stderr, "stand-in gateway:", err)
	os.Exit(1)
}

// An agent that ignores the end of its input and SIGTERM dies with its
// gateway when the gateway is killed outright (SIGKILL, a crash), rather
// than living on beside the agent a takeover starts: the parent-death
// signal. (One such agent, with its tool child, outlived a SIGKILLed
// replica.)
func TestAgentDiesWithItsGateway(t *testing.T) {
	t.Parallel()
	gw := exec.Command(os.Args[0], "-test.run=^$")
	gw.Env = append(os.Environ(), gatewayEnv+"=1")
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	gw.Stderr = os.Stderr
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = gw.Process.Kill()
		_ = gw.Wait()
		t.Fatalf("the stand-in gateway's agent pid: %q, %v, %v", line, err, perr)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if err := gw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	alive := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the command's closing parenthesis.
		st := string(b[strings.LastIndexByte(string(b), ')')+2:])
		return !strings.HasPrefix(st, "Z") && !strings.HasPrefix(st, "X")
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive() {
		if time.Now().After(deadline) {
			t.Fatalf("the agent (pid %d) outlived its killed gateway", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startAgent runs a scripted agent (this test binary, re-executed).
func startAgent(t *testing.T, s agentsim.Script, maxLine int) (*Agent, *recorder) {
	t.Helper()
	cmd, err := agentsim.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	a, err := Start(context.Background(), Config{Command: cmd, Dir: t.TempDir(), Client: rec, MaxLine: maxLine,
		StartTimeout: 10 * time.Second, StopGrace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, rec
}

// TestFloodComesThroughInOrder: a real agent's flood of updates reaches the
// client whole and in order, through the one-pass path, before the turn's
// answer.
func TestFloodComesThroughInOrder(t *testing.T) {
	t.Parallel()
	const n = 500
	for _, v := range []int{1, 2} {
		a, rec := startAgent(t, agentsim.Script{ProtocolVersion: v, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Flood: &agentsim.Flood{
			Count: n, Update: []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{{n}}"}}`)}}}}}}, DefaultMaxLine)
		sid, err := a.NewSession(context.Background(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Prompt(context.Background(), sid, nil, nil); err != nil {
			t.Fatalf("v%d: prompt: %v", v, err)
		}
		var chunks []string
		for _, s := range rec.seen() {
			if !strings.HasSuffix(s, " ?") {
				chunks = append(chunks, s)
			}
		}
		if len(chunks) != n {
			t.Fatalf("v%d: %d updates, want %d", v, len(chunks), n)
		}
		for i, s := range chunks {
			if want := fmt.Sprintf("update %s %d", sid, i+1); s != want {
				t.Fatalf("v%d: update %d is %q, want %q", v, i, s, want)
			}
		}
		if d := a.stream.directLines.Load(); d < n {
			t.Fatalf("v%d: %d lines took the one-pass path, want at least %d", v, d, n)
		}
	}
}

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

// TestProtocolErrorsEndTheAgent: a line over the limit, or one that is not
// JSON, ends the agent with a protocol error that says which.
func TestProtocolErrorsEndTheAgent(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		step agentsim.Step
		want string
	}{
		"too long": {agentsim.Step{LongLine: 4096}, "line too long: over 1024 bytes"},
		"not JSON": {agentsim.Step{Raw: "this is not JSON"}, "protocol error: invalid character"},
	} {
		before := agentsim.Step{Update: []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"before"}}`)}
		a, rec := startAgent(t, agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{before, c.step}}}}, 1024)
		sid, err := a.NewSession(context.Background(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Prompt(context.Background(), sid, nil, nil)
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: prompt: %v, want %q", name, err, c.want)
		}
		<-a.Done()
		if a.Reason() != ReasonProtocolError || !strings.Contains(a.Err().Error(), c.want) {
			t.Errorf("%s: ended %s: %v", name, a.Reason(), a.Err())
		}
		if got := rec.seen(); len(got) != 1 || got[0] != "update "+sid+" before" {
			t.Errorf("%s: the client saw %q", name, got)
		}
	}
}

// TestIdleAgentGoroutines: an idle agent costs the gateway four goroutines
// (the reaper, the stderr reader, and jsonrpc2's read loop and the one it
// keeps waiting on its context), none of ours waiting only to learn of its
// end. Not parallel, so that other tests'
// goroutines do not come and go meanwhile.
func TestIdleAgentGoroutines(t *testing.T) {
	const n = 4
	runtime.GC()
	before := runtime.NumGoroutine()
	// Start leaves no goroutine of its own behind to wait out: the call
	// that initializes the agent stops its watch (context.AfterFunc) before
	// it returns.
	for range n {
		startAgent(t, agentsim.Script{ProtocolVersion: 2}, DefaultMaxLine)
	}
	if per := float64(runtime.NumGoroutine()-before) / n; per > 4 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%.1f goroutines per idle agent, want at most 4:\n%s", per, buf[:runtime.Stack(buf, true)])
	}
}

// TestIdleAgentsHoldNoThreads: waiting for an agent's exit parks a
// goroutine rather than an OS thread (each thread costs the gateway its
// own stacks). Not parallel, so that other tests' threads do not come and
// go meanwhile.
func TestIdleAgentsHoldNoThreads(t *testing.T) {
	const n = 16
	threads := func() int {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(tasks)
	}
	before := threads()
	agents := make([]*Agent, n)
	for i := range agents {
		agents[i], _ = startAgent(t, agentsim.Script{ProtocolVersion: 2}, DefaultMaxLine)
	}
	if grew := threads() - before; grew >= n/2 {
		t.Fatalf("%d idle agents added %d OS threads, want fewer than %d", n, grew, n/2)
	}
	// Their exits are still seen: a closed agent is reaped and ended.
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(a.Close)
	}
	wg.Wait()
	for _, a := range agents {
		if r := a.Reason(); r != ReasonStopped {
			t.Fatalf("closed agent's reason %q, want %q", r, ReasonStopped)
		}
	}
}

// TestOnDone: the OnDone function runs once the agent has ended, whether
// it was set before or after the end, and the agent is done by then.
func TestOnDone(t *testing.T) {
	t.Parallel()
	a, _ := startAgent(t, agentsim.Script{ProtocolVersion: 2}, DefaultMaxLine)
	ran := make(chan string, 2)
	// Run before the end, f would send "", the Reason of a running agent.
	a.OnDone(func() { ran <- a.Reason() })
	a.Close()
	if r := <-ran; r != ReasonStopped {
		t.Fatalf("OnDone saw reason %q, want %q", r, ReasonStopped)
	}
	a.OnDone(func() { ran <- "late" })
	if r := <-ran; r != "late" {
		t.Fatalf("late OnDone: got %q", r)
	}
}

// TestCallEndsWhenTheAgentExits: a request pending when the agent exits
// fails with the agent's end, even though a process it left behind keeps
// its output open (so the connection itself never breaks).
func TestCallEndsWhenTheAgentExits(t *testing.T) {
	t.Parallel()
	status := 3
	script, err := agentsim.Command(agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Exit: &status}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := append([]string{"/bin/sh", "-c", `sleep 300 & exec "$@"`, "sh"}, script...)
	a, err := Start(context.Background(), Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{},
		StartTimeout: 10 * time.Second, StopGrace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close) // kills the sleep left in the group
	sid, err := a.NewSession(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Prompt(ctx, sid, nil, nil); !errors.Is(err, ErrExited) || ctx.Err() != nil {
		t.Fatalf("prompt err = %v (ctx %v), want the agent's exit", err, ctx.Err())
	}
	if r := a.Reason(); r != ReasonFailed {
		t.Fatalf("reason %q, want %q", r, ReasonFailed)
	}
}

// TestCallerCancelReturnsAtOnce: a call whose caller gives up returns its
// context's error, without waiting for the agent to end (which would take
// until StopGrace, here longer than the test allows).
func TestCallerCancelReturnsAtOnce(t *testing.T) {
	t.Parallel()
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Sleep: agentsim.Duration(time.Minute)},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Start(context.Background(), Config{Command: cmd, Dir: t.TempDir(), Client: &recorder{},
		StartTimeout: 10 * time.Second, StopGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	sid, err := a.NewSession(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Prompt(ctx, sid, nil, cancel) // cancelled once sent
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("prompt err = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a cancelled call waited for the agent to end")
	}
	if a.Err() != nil {
		t.Fatalf("the agent ended: %v", a.Err())
	}
}
