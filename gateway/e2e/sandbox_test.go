package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/boltstore"
)

// hosted is a multi-user gateway laid out as serve lays out its state
// directory: a token file, a bolt store, the users' workspaces and their
// agents' homes, all in one directory.
type hosted struct {
	*gateway
	state, tokens, store string
	workspaces, homes    *workspace.Root
	alice, bob           acpv2connect.SessionServiceClient
}

// shellTurn is a turn of Shell steps, one a command.
func shellTurn(commands ...string) agentsim.Turn {
	var steps []agentsim.Step
	for _, c := range commands {
		steps = append(steps, agentsim.Step{Shell: c})
	}
	return agentsim.Turn{Steps: steps}
}

// startHosted runs a hosted gateway with agents made by scripts (given the
// state directory and the token file's path), confined or not.
//
// With egress (confined only) each agent's network ends at the egress
// proxy, which also lets through the HOST:PORTs listed.
func startHosted(t *testing.T, confine bool, lim limits.Limits, scripts func(h *hosted) map[string]agentsim.Script, egressAllow ...string) *hosted {
	t.Helper()
	h := &hosted{state: t.TempDir()}
	h.tokens = filepath.Join(h.state, "tokens")
	h.store = filepath.Join(h.state, "sessions.db")
	if err := os.WriteFile(h.tokens, []byte("tok-alice-0123456789 alice\ntok-bob-0123456789 bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(h.tokens)
	if err != nil {
		t.Fatal(err)
	}
	store, err := boltstore.Open(h.store, statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if h.workspaces, err = workspace.New(filepath.Join(h.state, "workspaces")); err != nil {
		t.Fatal(err)
	}
	if h.homes, err = workspace.New(filepath.Join(h.state, "homes")); err != nil {
		t.Fatal(err)
	}
	agents := map[string][]string{}
	for name, s := range scripts(h) {
		s.Resume = true
		agents[name] = agentCommand(t, s)
	}
	var sb *sandbox.Sandbox
	var lc *limits.Controller
	var policy *egress.Policy
	helper, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if confine && egressAllow != nil {
		if policy, err = egress.NewPolicy(egressAllow); err != nil {
			t.Fatal(err)
		}
	}
	if confine {
		if sb, err = sandbox.New(context.Background(), sandbox.Options{Hide: []string{h.tokens, h.store}}); err != nil {
			t.Fatal(err)
		}
		if lc, err = limits.Setup(lim); err != nil {
			t.Fatal(err)
		}
	}
	h.gateway = startGateway(t, gatewayOpts{
		agents: agents, auth: tokens, store: store, workspaces: h.workspaces, confineCwd: true,
		env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + h.state},
		configure: func(c *app.Config) {
			c.Session.Sandbox, c.Session.Homes, c.Session.Limits = sb, h.homes, lc
			c.Session.Egress, c.Session.EgressHelper = policy, helper
		},
	})
	h.alice = h.clientsAs(t, "tok-alice-0123456789")["connect+json"]
	h.bob = h.clientsAs(t, "tok-bob-0123456789")["connect+json"]
	return h
}

// create makes a session of agent for c in a new workspace.
func create(t *testing.T, c acpv2connect.SessionServiceClient, agent string) string {
	t.Helper()
	res, err := c.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent}))
	if err != nil {
		t.Fatalf("CreateSession %s: %v", agent, err)
	}
	return res.Msg.GetSessionId()
}

// said joins the text of the turn's agent messages.
func said(events []*acpv2.SessionEvent) string {
	var b strings.Builder
	for _, e := range events {
		if m := e.GetAgentMessageChunk(); m != nil {
			b.WriteString(m.GetContent().GetText().GetText())
			b.WriteString("\n")
		}
	}
	return b.String()
}

// spyScripts are a user's agent that tries everything issue 18 lists
// against the gateway (the process gateway) and another user, each attack
// printing LEAK: when it works, and bob's agent, recognisable by a marker
// in its command line.
func spyScripts(marker, sleeper string, gateway int) func(h *hosted) map[string]agentsim.Script {
	return func(h *hosted) map[string]agentsim.Script {
		gw := strconv.Itoa(gateway)
		// A pattern for bob's marker that the spy's own command line,
		// which holds the pattern, does not match.
		pattern := "'" + marker[:len(marker)-1] + "[" + marker[len(marker)-1:] + "]'"
		bobWS := filepath.Join(h.workspaces.Dir(), "bob")
		bobHome := filepath.Join(h.homes.Dir(), "bob")
		spy := shellTurn(
			"cat "+h.tokens+" 2>/dev/null && echo LEAK:tokens",
			"head -c 16 "+h.store+" >/dev/null 2>&1 && echo LEAK:store",
			"cat /proc/"+gw+"/environ >/dev/null 2>&1 && echo LEAK:environ",
			"cat /proc/"+gw+"/cmdline >/dev/null 2>&1 && echo LEAK:cmdline",
			"test -r /proc/"+gw+"/mem && echo LEAK:mem",
			"kill -0 "+gw+" 2>/dev/null && echo LEAK:signal-gateway",
			"(echo 1000 > /proc/"+gw+"/oom_score_adj) 2>/dev/null && echo LEAK:oom_score_adj",
			"pgrep -f "+pattern+" >/dev/null && echo LEAK:see-bob",
			"pkill -CONT -f "+pattern+" && echo LEAK:signal-bob",
			"ls "+bobWS+" >/dev/null 2>&1 && echo LEAK:bob-workspace",
			"ls "+bobHome+" >/dev/null 2>&1 && echo LEAK:bob-home",
			"echo login > $HOME/cred && echo home-ok",
			"echo made > ./made && echo workspace-ok",
			"setsid -f sleep "+sleeper+" >/dev/null 2>&1 && echo detached",
		)
		return map[string]agentsim.Script{
			"spy": {Turns: []agentsim.Turn{spy}},
			"bob": {Turns: []agentsim.Turn{shellTurn("echo " + marker + " > $HOME/cred; echo bob-ok")}},
		}
	}
}

// newSleeper returns an argument of sleep that no other process has.
func newSleeper() string { return fmt.Sprintf("4242.%d", time.Now().UnixNano()) }

// sleepersLeft lists the processes whose command line is sleep arg.
func sleepersLeft(arg string) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Equal(b, []byte("sleep\x00"+arg+"\x00")) {
			left = append(left, e.Name())
		}
	}
	return left
}

func TestSandboxedAgentReachesNothingOfTheGatewayOrOtherUsers(t *testing.T) {
	marker := fmt.Sprintf("bob-marker-%d", time.Now().UnixNano())
	sleeper := newSleeper()
	h := startHosted(t, true, limits.Limits{Pids: 256}, spyScripts(marker, sleeper, os.Getpid()))
	oomBefore, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	bob := create(t, h.bob, "bob")
	if got := said(turn(t, h.bob, bob, nil)); !strings.Contains(got, "bob-ok") {
		t.Fatalf("bob's turn: %q", got)
	}
	spy := create(t, h.alice, "spy")
	got := said(turn(t, h.alice, spy, nil))
	if strings.Contains(got, "LEAK:") {
		t.Errorf("the sandboxed agent reached what it must not:\n%s", got)
	}
	for _, ok := range []string{"home-ok", "workspace-ok", "detached"} {
		if !strings.Contains(got, ok) {
			t.Errorf("the agent could not do its own work (%s):\n%s", ok, got)
		}
	}
	if after, _ := os.ReadFile("/proc/self/oom_score_adj"); !bytes.Equal(after, oomBefore) {
		t.Errorf("the gateway's oom_score_adj changed: %q to %q", oomBefore, after)
	}
	// Its own files are where they belong: its HOME under its user's.
	if b, err := os.ReadFile(filepath.Join(h.homes.Dir(), "alice", "cred")); err != nil || string(b) != "login\n" {
		t.Errorf("alice's home: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(h.homes.Dir(), "bob", "cred")); err != nil || !strings.Contains(string(b), marker) {
		t.Errorf("bob's home: %q, %v", b, err)
	}
	// Bob's agent was not stopped or signalled: it still works.
	if got := said(turn(t, h.bob, bob, nil)); !strings.Contains(got, "bob-ok") {
		t.Errorf("bob's second turn: %q", got)
	}
	// A setsid child of the agent dies with the session.
	if len(sleepersLeft(sleeper)) == 0 {
		t.Fatal("the detached child is not running")
	}
	if _, err := h.alice.CloseSession(context.Background(), connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: spy})); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the detached child to end with its session", func() bool { return len(sleepersLeft(sleeper)) == 0 })
}

// TestUnconfinedAgentReachesEverything is the control: the same agent
// without the sandbox reaches what the test above says it must not, so
// that test shows the sandbox at work, not an attack that fails anyway.
//
// The processes it attacks stand in for the gateway: a child of the test,
// of the gateway's user as an unconfined agent's gateway is, so that the
// attacks that work (its oom_score_adj raised, a signal) change it, not
// the test's process, which the other tests go on in.
func TestUnconfinedAgentReachesEverything(t *testing.T) {
	marker := fmt.Sprintf("bob-marker-%d", time.Now().UnixNano())
	sleeper := newSleeper()
	standIn := exec.Command("sleep", "600")
	if err := standIn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = standIn.Process.Kill()
		_ = standIn.Wait()
	})
	// The child the spy leaves, which nothing confines, goes with the
	// test, whether it passes or not.
	t.Cleanup(func() {
		for _, p := range sleepersLeft(sleeper) {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	oomBefore, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	h := startHosted(t, false, limits.Limits{}, spyScripts(marker, sleeper, standIn.Process.Pid))
	bob := create(t, h.bob, "bob")
	turn(t, h.bob, bob, nil)
	spy := create(t, h.alice, "spy")
	got := said(turn(t, h.alice, spy, nil))
	for _, leak := range []string{"tokens", "store", "environ", "cmdline", "signal-gateway", "oom_score_adj", "see-bob", "bob-workspace"} {
		if !strings.Contains(got, "LEAK:"+leak+"\n") {
			t.Errorf("unconfined, the attack %s failed anyway:\n%s", leak, got)
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", standIn.Process.Pid)); err != nil || strings.TrimSpace(string(b)) != "1000" {
		t.Errorf("the stand-in's oom_score_adj: %q, %v; want the spy's 1000", b, err)
	}
	if after, _ := os.ReadFile("/proc/self/oom_score_adj"); !bytes.Equal(after, oomBefore) {
		t.Errorf("the test's own oom_score_adj changed: %q to %q", oomBefore, after)
	}
}

func TestAgentOverItsMemoryEndsAloneAndItsSessionGoesOn(t *testing.T) {
	h := startHosted(t, true, limits.Limits{Memory: 96 << 20, Pids: 256}, func(h *hosted) map[string]agentsim.Script {
		return map[string]agentsim.Script{
			// The first turn buffers 300 MB in a tool, and goes on (as an
			// agent would after a tool failed) until it is killed; later
			// turns work.
			"hog": {Turns: []agentsim.Turn{shellTurn("test -e done && echo second-ok || { touch done; head -c 300000000 /dev/zero | tail; sleep 20; }")}},
			"bob": {Turns: []agentsim.Turn{shellTurn("echo bob-ok")}},
		}
	})
	bob := create(t, h.bob, "bob")
	hog := create(t, h.alice, "hog")
	events := turn(t, h.alice, hog, nil)
	end := events[len(events)-1].GetTurnEnded()
	if !strings.Contains(end.GetError(), "out of memory") {
		t.Errorf("the turn ended %v, want an error that says out of memory; the agent said %q", end, said(events))
	}
	var lost *acpv2.SessionStateChanged
	for _, e := range events {
		if sc := e.GetStateChanged(); sc != nil && sc.GetState() == string(statestore.StateAgentLost) {
			lost = sc
		}
	}
	if lost == nil || !strings.Contains(lost.GetDetail(), "out of memory") {
		t.Errorf("no agent_lost state that says out of memory: %v", lost)
	}
	if got := testutil.MetricSum(t, h.metrics.Registry(), "acp_gateway_agent_exits_total", "reason=oom"); got != 1 {
		t.Errorf("agent exits for oom: %v, want 1", got)
	}
	// Bob's session is unharmed, and alice's can be prompted again.
	if got := said(turn(t, h.bob, bob, nil)); !strings.Contains(got, "bob-ok") {
		t.Errorf("bob's turn: %q", got)
	}
	if got := said(turn(t, h.alice, hog, nil)); !strings.Contains(got, "second-ok") {
		t.Errorf("the session's next turn: %q", got)
	}
}

func TestForkLoopStopsAtItsLimitAndOthersWork(t *testing.T) {
	h := startHosted(t, true, limits.Limits{Pids: 40}, func(h *hosted) map[string]agentsim.Script {
		return map[string]agentsim.Script{
			// Sleepers hold the processes while bob works.
			"forker": {Turns: []agentsim.Turn{shellTurn("for i in $(seq 200); do sleep 30 >/dev/null 2>&1 & done; echo all-started")}},
			"bob":    {Turns: []agentsim.Turn{shellTurn("echo bob-ok")}},
		}
	})
	forker := create(t, h.alice, "forker")
	bob := create(t, h.bob, "bob")
	// Bob's turn runs while the fork loop presses on its limit.
	bobDone := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		events, err := testutil.Turn(ctx, h.bob, &acpv2.PromptRequest{SessionId: bob, Prompt: textPrompt("go")}, nil)
		if err != nil {
			bobDone <- err.Error()
			return
		}
		bobDone <- said(events)
	}()
	got := said(turn(t, h.alice, forker, nil))
	if strings.Contains(got, "all-started") || !strings.Contains(got, "fork") {
		t.Errorf("the fork loop was not stopped at its limit: %q", got)
	}
	// Another user can still start an agent and run a turn.
	other := create(t, h.bob, "bob")
	if got := said(turn(t, h.bob, other, nil)); !strings.Contains(got, "bob-ok") {
		t.Errorf("bob's new session: %q", got)
	}
	if got := <-bobDone; !strings.Contains(got, "bob-ok") {
		t.Errorf("bob's running turn: %q", got)
	}
}

// TestSandboxedAgentReachesOnlyWhatIsListed: a sandboxed agent's network
// ends at the egress proxy, which refuses the gateway's port, a service on
// loopback, a Redis port and cloud metadata, and lets a listed loopback
// service (a model API on the host) through. Unconfined, the same agent
// reaches the services.
func TestSandboxedAgentReachesOnlyWhatIsListed(t *testing.T) {
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "secret-reached") }))
	defer secret.Close()
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "model-reached") }))
	defer model.Close()
	curl := func(url, label string, extra ...string) string {
		return "curl -s -m 5 " + strings.Join(extra, " ") + " " + url + " | grep -q reached && echo REACHED:" + label + " || echo refused:" + label
	}
	for _, confined := range []bool{true, false} {
		t.Run(fmt.Sprintf("confined=%v", confined), func(t *testing.T) {
			probes := []string{
				curl(model.URL, "model"),
				curl(secret.URL, "secret"),
				// The gateway answers /healthz with "ok".
				"curl -s -m 5 http://$(cat gateway)/healthz | grep -q ok && echo REACHED:gateway || echo refused:gateway",
				// Around the proxy, straight to the address.
				curl(secret.URL, "secret-direct", "--noproxy '*'"),
			}
			if confined {
				// Only through the proxy, which refuses them before it
				// dials: no packet leaves this host's loopback.
				probes = append(probes, curl("http://169.254.169.254/", "metadata"),
					"curl -s -m 5 -p -x \"$HTTPS_PROXY\" telnet://127.0.0.1:6379 </dev/null >/dev/null 2>&1; echo tunnel:$?",
					// Redis straight, around the proxy.
					"curl -s -m 5 --noproxy '*' telnet://127.0.0.1:6379 </dev/null >/dev/null 2>&1; echo redis-direct:$?")
			}
			h := startHosted(t, confined, limits.Limits{}, func(h *hosted) map[string]agentsim.Script {
				return map[string]agentsim.Script{"net": {Turns: []agentsim.Turn{shellTurn(probes...)}}}
			}, strings.TrimPrefix(model.URL, "http://"))
			// The agent finds the gateway's address in its workspace.
			dir := filepath.Join(h.workspaces.Dir(), "alice", "net")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "gateway"), []byte(strings.TrimPrefix(h.base, "http://")), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := h.alice.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "net", Cwd: dir}))
			if err != nil {
				t.Fatal(err)
			}
			got := said(turn(t, h.alice, res.Msg.GetSessionId(), nil))
			t.Logf("the agent saw:\n%s", got)
			if confined && !strings.Contains(got, "REACHED:model") {
				t.Errorf("the listed model API was not reached:\n%s", got)
			}
			for _, label := range []string{"secret", "gateway", "secret-direct"} {
				if reached := strings.Contains(got, "REACHED:"+label+"\n"); reached == confined {
					t.Errorf("confined %v: %s reached %v:\n%s", confined, label, reached, got)
				}
			}
			if confined && (strings.Contains(got, "REACHED:metadata") || !strings.Contains(got, "tunnel:") || strings.Contains(got, "tunnel:0\n") ||
				!strings.Contains(got, "redis-direct:") || strings.Contains(got, "redis-direct:0\n")) {
				t.Errorf("the proxy let through metadata or a tunnel to Redis:\n%s", got)
			}
		})
	}
}

// TestWorkspaceSwappedForALinkLeadsNowhere: a session's directory, checked
// at CreateSession, that a link replaces later (another agent of the same
// user can do it) does not lead the session's next agent into another
// user's workspace.
func TestWorkspaceSwappedForALinkLeadsNowhere(t *testing.T) {
	status := 0
	h := startHosted(t, true, limits.Limits{}, func(h *hosted) map[string]agentsim.Script {
		return map[string]agentsim.Script{
			// Its first turn ends its agent; the next one looks around.
			"peek": {Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Shell: "cat secret 2>/dev/null && echo LEAK:bob-workspace || echo no-secret"}, {Exit: &status}}}}},
			"bob":  {Turns: []agentsim.Turn{shellTurn("echo bob-secret > secret")}},
		}
	})
	bob := create(t, h.bob, "bob")
	turn(t, h.bob, bob, nil)
	bobDir := snapshotOf(t, h.bob, bob).GetCwd()
	dir := filepath.Join(h.workspaces.Dir(), "alice", "q")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := h.alice.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "peek", Cwd: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()
	if got := said(turn(t, h.alice, id, nil)); strings.Contains(got, "LEAK") {
		t.Fatalf("before the swap: %s", got)
	}
	// The session's directory becomes a link to bob's.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bobDir, dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, err := testutil.Turn(ctx, h.alice, &acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}, nil)
	if got := said(events); strings.Contains(got, "LEAK") || strings.Contains(got, "bob-secret") {
		t.Errorf("the agent reached bob's workspace through the link:\n%s", got)
	}
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the prompt after the swap: %v, want permission_denied", err)
	}
}

func snapshotOf(t *testing.T, c acpv2connect.SessionServiceClient, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := c.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession()
}

// TestAgentsThatCannotBeSandboxedLeakNothing: an agent whose sandbox
// cannot be laid out (its user's HOME cannot be made) is not started, and
// what was opened for it, its workspace's descriptor, is closed, not left
// to the garbage collector. Not parallel: it counts this process's file
// descriptors.
func TestAgentsThatCannotBeSandboxedLeakNothing(t *testing.T) {
	h := startHosted(t, true, limits.Limits{}, func(h *hosted) map[string]agentsim.Script {
		return map[string]agentsim.Script{"ok": {Turns: []agentsim.Turn{shellTurn("echo ok")}}}
	})
	// A file holds the place of alice's agents' HOME.
	if err := os.WriteFile(filepath.Join(h.homes.Dir(), "alice"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func() {
		t.Helper()
		_, err := h.alice.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "ok"}))
		if err == nil || !strings.Contains(err.Error(), "home") {
			t.Fatalf("CreateSession without a home for the agent: %v, want an error about its home", err)
		}
	}
	refused() // opens the client's connections
	// No collection closes a lost descriptor behind the test's back.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := openFDs(t)
	for range 5 {
		refused()
	}
	testutil.WaitFor(t, "the refused agents' descriptors to close", func() bool { return openFDs(t) <= before })
}

// TestListAgentsAsksASandboxedAgent: the agent ListAgents starts to ask
// what it offers runs confined as a session's agent does: an agent that
// kills itself at start-up where it can read the gateway's token file is
// described all the same.
func TestListAgentsAsksASandboxedAgent(t *testing.T) {
	t.Parallel()
	h := startHosted(t, true, limits.Limits{}, func(h *hosted) map[string]agentsim.Script {
		return map[string]agentsim.Script{"probe": {ProtocolVersion: 2, Startup: []agentsim.Step{
			{Shell: "if test -e " + h.tokens + "; then kill -9 $PPID; fi"}}}}
	})
	res, err := h.alice.ListAgents(context.Background(), connect.NewRequest(&acpv2.ListAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Msg.GetAgents(); len(a) != 1 || a[0].GetError() != "" || a[0].GetProtocolVersion() != 2 {
		t.Fatalf("agents %v, want the sandboxed agent described", a)
	}
}
