package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	runGatewayIfCommanded()
	// The readers, waiters and pumps an agent starts must end with it.
	goleak.VerifyTestMain(m)
}

// gatewayEnv makes this test binary a stand-in gateway (see
// runGatewayIfCommanded), in the mode it is set to.
const gatewayEnv = "ACP_GATEWAY_TEST_STAND_IN_GATEWAY"

// detachedEnv names the file where the agent of a stand-in gateway in
// mode "limits" has its detached child write its pid.
const detachedEnv = "ACP_GATEWAY_TEST_DETACHED_PID_FILE"

// runGatewayIfCommanded makes this process a stand-in gateway when
// gatewayEnv is set, and never returns then. In mode "agent" it starts an
// agent that ignores the end of its input and its signals, writes the
// agent's pid, and waits to be killed. In mode "limits" it first waits for
// a line on its stdin (to be put in a cgroup), sets up per-agent limits,
// starts the same agent in a group of them, which first starts a detached
// child, and writes the agent's pid. In mode "reap" it waits for its line,
// sets up the limits, writes each group it reaped ("reaped GROUP
// KILLED"), and exits.
func runGatewayIfCommanded() {
	mode := os.Getenv(gatewayEnv)
	if mode == "" {
		return
	}
	err := runGateway(mode)
	fmt.Fprintln(os.Stderr, "stand-in gateway:", err)
	os.Exit(1)
}

func runGateway(mode string) error {
	script, cfg := agentsim.Script{IgnoreEOF: true}, Config{Dir: os.TempDir(), Client: &recorder{}, StartTimeout: 30 * time.Second}
	if mode == "limits" || mode == "reap" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		c, err := limits.Setup(limits.Limits{Pids: 64})
		if err != nil {
			return err
		}
		if mode == "reap" {
			for _, r := range c.Reaped() {
				fmt.Println("reaped", r.Group, r.Killed, r.Err)
			}
			c.Close()
			os.Exit(0)
		}
		g, err := c.New("stand-in")
		if err != nil {
			return err
		}
		cfg.Group = g
		// A child that leaves the agent's session and process group (a
		// tool's daemon), and ignores the signals a hang-up sends.
		script.Startup = []agentsim.Step{{Shell: fmt.Sprintf(`setsid sh -c 'trap "" TERM HUP; sleep 600 & echo $! > %s' </dev/null >/dev/null 2>&1 &`, os.Getenv(detachedEnv))}}
	}
	var err error
	if cfg.Command, err = agentsim.Command(script); err != nil {
		return err
	}
	a, err := Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	fmt.Println(a.cmd.Process.Pid)
	select {}
}

// standIn starts this test binary, exe, as a stand-in gateway in mode,
// with env added to its environment, as the user of cred (nil: this
// process's), placed in the cgroup whose process list is procs (where it
// is not empty) before it does anything. It returns the process and its
// output; the process is killed when the test ends.
func standIn(t *testing.T, exe, mode string, env []string, cred *syscall.Credential, procs string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	gw := exec.Command(exe, "-test.run=^$")
	gw.Env = append(append(os.Environ(), gatewayEnv+"="+mode), env...)
	gw.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	gw.Stderr = os.Stderr
	in, err := gw.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Process.Kill(); _ = gw.Wait() })
	if procs != "" {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(gw.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return gw, bufio.NewReader(out)
}

// readPid reads the pid a stand-in gateway writes, and kills that process
// when the test ends.
func readPid(t *testing.T, out *bufio.Reader) int {
	t.Helper()
	line, err := out.ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the stand-in gateway's agent pid: %q, %v, %v", line, err, perr)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	return pid
}

// An agent that ignores the end of its input and SIGTERM dies with its
// gateway when the gateway is killed outright (SIGKILL, a crash), rather
// than living on beside the agent a takeover starts: the parent-death
// signal. (One such agent, with its tool child, outlived a SIGKILLed
// replica.)
func TestAgentDiesWithItsGateway(t *testing.T) {
	t.Parallel()
	gw, out := standIn(t, os.Args[0], "agent", nil, nil, "")
	pid := readPid(t, out)
	if err := gw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for procfs.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent (pid %d) outlived its killed gateway", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With per-agent limits and no sandbox, what an agent started and
// detached (its own session, a double fork, SIGTERM and SIGHUP ignored)
// outlives its SIGKILLed gateway, but not the next gateway's start, which
// kills it; the agent of a gateway running beside them, with the same
// parent cgroup, and its detached child, live on. Where the test runs as
// root, the gateways run as nobody in a cgroup subtree delegated to them,
// as production runs them.
func TestDetachedChildDiesAtTheNextGatewaysStart(t *testing.T) {
	t.Parallel()
	exe, cred, procs := delegatedCgroup(t)
	// Where nobody can write (t.TempDir's parent is private).
	pidFiles, err := os.MkdirTemp("", "agent-test-pids")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pidFiles) })
	if err := os.Chmod(pidFiles, 0o777); err != nil {
		t.Fatal(err)
	}
	limited := func(name string) (*exec.Cmd, int, int) {
		t.Helper()
		file := filepath.Join(pidFiles, name)
		gw, out := standIn(t, exe, "limits", []string{detachedEnv + "=" + file}, cred, procs)
		agent := readPid(t, out)
		var detached int
		testutil.WaitFor(t, "the "+name+" agent's detached child to start", func() bool {
			b, err := os.ReadFile(file)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			detached, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		})
		t.Cleanup(func() { _ = unix.Kill(detached, unix.SIGKILL) })
		return gw, agent, detached
	}
	gw, agent, detached := limited("dead")
	_, siblingAgent, siblingDetached := limited("sibling")

	if err := gw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	testutil.WaitFor(t, "the agent to die with its gateway", func() bool { return !procfs.Alive(agent) })
	if !procfs.Alive(detached) {
		t.Fatal("the detached child died with its gateway: nothing left to test")
	}
	reaper, out := standIn(t, exe, "reap", nil, cred, procs)
	var reaped []string
	for line, err := out.ReadString('\n'); err == nil; line, err = out.ReadString('\n') {
		reaped = append(reaped, strings.TrimSpace(line))
	}
	if err := reaper.Wait(); err != nil {
		t.Fatalf("the reaping gateway: %v", err)
	}
	// (A gateway or test starting beside this one may have reaped it.)
	testutil.WaitFor(t, "the detached child to be killed", func() bool { return !procfs.Alive(detached) })
	t.Logf("reaped: %q", reaped)
	if !procfs.Alive(siblingAgent) || !procfs.Alive(siblingDetached) {
		t.Errorf("the running sibling's agent (alive %v) or its detached child (alive %v) was killed", procfs.Alive(siblingAgent), procfs.Alive(siblingDetached))
	}
}

// delegatedCgroup returns the test binary to run stand-in gateways with,
// the user to run them as and the process list of the cgroup to put them
// in. Run as root on a host with a v1 pids hierarchy, it is a copy of the
// binary that nobody may run, nobody, and a new pids group owned by nobody
// (what systemd's Delegate=yes gives a service's user); otherwise this
// binary, this user and no group.
func delegatedCgroup(t *testing.T) (exe string, cred *syscall.Credential, procs string) {
	t.Helper()
	const nobody = 65534
	var own string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.SplitN(strings.TrimSpace(line), ":", 3); len(f) == 3 && f[1] == "pids" {
				own = f[2]
			}
		}
	}
	if os.Geteuid() != 0 || own == "" {
		return os.Args[0], nil, ""
	}
	dir := filepath.Join("/sys/fs/cgroup/pids", own, fmt.Sprintf("agent-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	for _, f := range []string{"", "cgroup.procs", "tasks"} {
		if err := os.Chown(filepath.Join(dir, f), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.MkdirTemp("", "agent-test-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	exe = filepath.Join(bin, "agent.test")
	src, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(exe, src, 0o755)
	}
	if err == nil {
		err = os.Chmod(bin, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return exe, &syscall.Credential{Uid: nobody, Gid: nobody}, filepath.Join(dir, "cgroup.procs")
}

// removeCgroupTree kills every process in the group at dir and the groups
// below it, and removes them.
func removeCgroupTree(t *testing.T, dir string) {
	testutil.WaitFor(t, "the test's cgroups to be removed", func() bool {
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			b, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			_ = unix.Rmdir(dirs[i])
		}
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist)
	})
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

// TestProtocolErrorsEndTheAgent: a line over the limit, or one that is not
// JSON, ends the agent with a protocol error that says which.
func TestProtocolErrorsEndTheAgent(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		step agentsim.Step
		want string
	}{
		"too long":       {agentsim.Step{LongLine: 4096}, "line too long: over 1024 bytes"},
		"not JSON":       {agentsim.Step{Raw: "this is not JSON"}, "protocol error: invalid character"},
		"an empty batch": {agentsim.Step{Raw: " []"}, "protocol error: an empty JSON-RPC batch"},
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

// A JSON-RPC batch from an agent (v2 transports follow JSON-RPC 2.0's batch
// rules) is read as its messages, in order, each update taking the
// one-pass path; it used to end the agent as a protocol error.
func TestBatchesAreReadAsTheirMessages(t *testing.T) {
	t.Parallel()
	chunk := func(text string) string {
		return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + agentsim.SessionIDPrefix + `1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}}}`
	}
	batch := agentsim.Step{Raw: " [" + chunk("one") + ", " + chunk("two") + "]"}
	after := agentsim.Step{Update: []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"three"}}`)}
	a, rec := startAgent(t, agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{batch, after}}}}, 0)
	sid, err := a.NewSession(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Prompt(context.Background(), sid, nil, nil); err != nil {
		t.Fatalf("prompt after a batch: %v", err)
	}
	var want []string
	for _, text := range []string{"one", "two", "three"} {
		want = append(want, "update "+sid+" "+text)
	}
	if got := rec.seen(); !slices.Equal(got, want) {
		t.Fatalf("the client saw %q, want %q", got, want)
	}
	if d := a.stream.directLines.Load(); d < 3 {
		t.Fatalf("%d messages took the one-pass path, want 3", d)
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
