// Package agent runs one ACP agent process and speaks ACP to it as the
// client: it spawns the agent in its own process group, talks JSON-RPC over
// the agent's stdin and stdout, relays what the agent sends through a
// [Client], and ends the whole process group when done.
package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// Defaults for [Config] fields left zero.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultStopGrace    = 2 * time.Second
	DefaultMaxLine      = 16 << 20
	// maxStderrLine bounds one logged stderr line; the rest is dropped.
	maxStderrLine = 8 << 10
)

// DefaultNice is how much lower than the gateway's the CPU priority of an
// agent's process tree is where serve is not told otherwise (Config.Nice):
// a busy agent then leaves the gateway, which relays every session, a CPU
// first, and keeps what is left to itself.
const DefaultNice = 10

// MaxNice is the highest nice value, the lowest CPU priority: a
// Config.Nice that would take an agent past it stops there.
const MaxNice = 19

// Update is one session/update notification from the agent.
type Update struct {
	// AgentSessionID is the notification's sessionId.
	AgentSessionID string
	// Update is never nil. An update that does not decode is kept whole
	// as [acpjson.KeepUnknown] keeps it, and Err says why.
	Update *acpv2.SessionUpdate
	Err    error
}

// clientProtocolVersion is the newest ACP version the gateway speaks.
const clientProtocolVersion = 2

// Client receives what the agent sends, in the order the agent sent it.
// RequestPermission, Elicit and ElicitationComplete are called from the
// agent's read loop, and SessionUpdates from a goroutine that runs beside
// it (the read loop decodes the next updates meanwhile, and waits for it
// before it handles any other message): none may block for long.
// RequestPermission and Elicit return a channel that is answered later.
type Client interface {
	// SessionUpdates receives the `update` of session/update
	// notifications, at least one: all those the read loop decoded while
	// the call before was under way, so that the Client may store them
	// together. Each is decoded for the agent's ACP version as
	// [acpjson.DecodeUpdate] decodes it. The slice is the caller's again
	// once the call returns.
	SessionUpdates(updates []Update)
	// RequestPermission receives the params of a session/request_permission
	// request. The agent gets the outcome sent on the returned channel, or
	// cancelled when the channel is closed without a value. withdraw is
	// called if the agent withdraws the request ($/cancel_request) before
	// that: the Client then answers it cancelled, at once. An error is
	// returned to the agent as the request's error.
	RequestPermission(params json.RawMessage) (outcome <-chan *acpv2.PermissionOutcome, withdraw func(), err error)
	// Elicit receives the params of an elicitation/create request, as
	// RequestPermission does a permission request's: the agent gets the
	// answer sent on the returned channel (its action, and its content
	// with accept), or cancel when the channel is closed without a
	// value; withdraw is called if the agent withdraws the request first.
	Elicit(params json.RawMessage) (answer <-chan *acpv2.ElicitationResolved, withdraw func(), err error)
	// ElicitationComplete receives the params of an elicitation/complete
	// notification.
	ElicitationComplete(params json.RawMessage)
}

// Config describes an agent to run.
type Config struct {
	// Command is the program and its arguments.
	Command []string
	// MCPServers are passed to session/new, session/resume and
	// session/load; check them with CheckMCP once the agent has started.
	MCPServers []MCPServer
	// Dir is the agent's working directory, and the root of the files it may
	// read and write through the gateway.
	Dir string
	// Env is the agent's whole environment.
	Env []string
	// Client receives the agent's updates and requests.
	Client Client
	// Log receives the agent's stderr, one record per line, and lifecycle
	// events.
	Log *slog.Logger
	// StderrLines and StderrBytes bound the agent's stderr in Log: lines
	// and bytes a second, with bursts of ten seconds' worth; the lines
	// past them are dropped, and counted in one record when logging
	// resumes. Zero means DefaultStderrLines and DefaultStderrBytes; less
	// than zero, no bound.
	StderrLines, StderrBytes int
	// StartTimeout bounds the start-up, until initialize is answered.
	StartTimeout time.Duration
	// StopGrace is how long Close waits after closing stdin, and again after
	// SIGTERM, before escalating.
	StopGrace time.Duration
	// MaxLine bounds one line of agent output; a longer line is a protocol
	// error that ends the agent.
	MaxLine int
	// BytesIn and BytesOut, when set, count the bytes read from the
	// agent's stdout and written to its stdin.
	BytesIn, BytesOut Counter
	// Group, when set, holds the agent's whole process tree under limits:
	// the agent's process is placed in it before it runs anything of its
	// own, and every process left in it is killed when the agent ends.
	// The agent owns it: Start closes it on error, and Close always.
	Group Group
	// Closers are closed once the agent has ended (or Start failed): what
	// serves this agent alone, such as its egress proxy.
	Closers []io.Closer
	// Fence, when set, is called with the agent as soon as its process
	// runs (before initialize), and in the read loop before each line of
	// its output is handled: it may [Agent.Freeze] the agent, and the
	// line then waits until the agent is thawed or ends. It is called for
	// every line, so it must be quick when it does nothing. A line that is
	// a JSON-RPC batch is one line: its messages are handled together.
	Fence func(*Agent)
	// Nice, when above zero, lowers the CPU priority of the agent's whole
	// process tree below the gateway's: its process group's nice value is
	// the gateway's own plus Nice, at most MaxNice. It is set as soon as
	// the process runs, before the agent is sent anything, so that what it
	// forks inherits it, and before it runs anything of its own (it waits
	// as a shell until then, as for a Group), so that nothing it starts
	// can leave its process group (setsid) at the gateway's priority.
	// Raising the nice value of one's own children needs no privilege, and
	// lowering it back needs one (CAP_SYS_NICE) that agents lack. When it
	// cannot be set, Start fails.
	Nice int
	// Workspace, when set, is Dir, opened (O_PATH) and checked by the
	// caller: the files the agent reads and writes through the gateway
	// are found from it rather than from Dir's path, and the agent's
	// process inherits it as descriptor WorkspaceFD (a sandbox binds the
	// directory it names), so that a symbolic link swapped in for a part
	// of Dir's path since the check leads nowhere. The caller closes it.
	Workspace *os.File
}

// Group is a set of processes under limits, such as a *limits.Group.
type Group interface {
	// Place puts process pid, and so its future children, in the group.
	Place(pid int) error
	// Kill ends every process in the group.
	Kill()
	// OOMKilled reports whether a process of the group was killed for
	// using more memory than the group may.
	OOMKilled() bool
	// Close ends every process in the group and releases it.
	Close()
}

// Freezer is a Group that can stop its processes and let them run again,
// such as a *limits.Group. Where its Freeze fails (a group without a
// cgroup, or one that did not reach frozen in time), it is thawed and the
// agent's processes are stopped with signals instead.
type Freezer interface {
	Freeze() error
	Thaw() error
}

// WorkspaceFD is the descriptor at which an agent's process inherits
// Config.Workspace.
const WorkspaceFD = 3

// holdScript waits, before it runs the agent's command line, until the
// gateway has placed its process in the agent's Group (and lowered its
// priority, see settle): a process placed after it started could have
// forked children outside it.
// It reads descriptor %[1]d.
const holdScript = `read -r _ <&%[1]d && exec %[1]d<&- "$0" "$@"`

// settle does what must be done to the agent's process, pid, while it is
// the shell that waits on hold: with a Group, it is placed in the Group;
// its process group is given the nice value nice where cfg.Nice asks for
// one; then the shell is let go.
func settle(pid int, cfg Config, nice int, hold *os.File) error {
	if cfg.Group != nil {
		if err := cfg.Group.Place(pid); err != nil {
			return err
		}
	}
	if cfg.Nice > 0 {
		// The group, which is the waiting shell alone. ESRCH: it is
		// gone, and initialize says why.
		if err := setPriority(syscall.PRIO_PGRP, pid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("lowering its CPU priority to nice %d: %w", nice, err)
		}
	}
	if hold != nil {
		_, err := hold.WriteString("\n")
		return err
	}
	return nil
}

// setPriority is syscall.Setpriority, but in tests.
var setPriority = syscall.Setpriority

// Counter counts bytes; a prometheus.Counter is one.
type Counter interface{ Add(float64) }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	c Counter
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.c.Add(float64(n))
	}
	return n, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	io.WriteCloser
	c Counter
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.WriteCloser.Write(p)
	if n > 0 {
		c.c.Add(float64(n))
	}
	return n, err
}

// Agent is a running agent process.
type Agent struct {
	cfg    Config
	cmd    *exec.Cmd
	conn   *jsonrpc2.Conn
	stream *lineStream
	// updates hands the updates the read loop decodes to the Client.
	updates *updateQueue
	fs      *fileServer
	out     *os.File // read end of the agent's stdout
	// callID numbers the gateway's requests to the agent (jsonrpc2's own
	// numbering is not exposed, and $/cancel_request needs the id).
	callID atomic.Uint64
	// asked holds, by request id, how to withdraw each permission request
	// of the agent's that waits for its answer (jsonrpc2.ID: *func()).
	asked sync.Map

	// version is the negotiated acpjson.Version, set once initialize is
	// answered; the read loop decodes updates with it.
	version atomic.Int64
	// profile is what the agent said of itself at initialize.
	profile Profile

	exited chan struct{} // closed when the process is reaped
	// tail keeps the last lines of the agent's stderr; stderrDone is
	// closed when its stderr has ended (all its writers gone).
	tail       stderrTail
	stderrDone chan struct{}
	// echoed is set when the agent sent the gateway an initialize
	// request: the gateway's own, sent back by a program that echoes.
	echoed atomic.Bool
	// ended is cancelled when the agent has ended, see finish; calls to
	// the agent are cut short by it.
	ended    context.Context
	setEnded context.CancelFunc
	closing  atomic.Bool // Close was called: the gateway ended the agent

	// closeOnce makes Close, which the session and its agent watcher may
	// call at once, signal the process group and release what the agent
	// holds only once; a second Close waits for the first.
	closeOnce sync.Once

	// freezeMu serialises Freeze, Thaw and Kill. frozen is set while the
	// agent is frozen (the read loop holds), thawed is closed when it is
	// thawed, and byGroup says that its Group froze it (not signals).
	freezeMu sync.Mutex
	frozen   atomic.Bool
	thawed   chan struct{}
	byGroup  bool

	endMu  sync.Mutex
	err    error  // why the agent ended; nil while it runs
	reason string // a word for why it ended, see Reason
	onDone func() // run once the agent has ended, see OnDone
}

// ErrExited is wrapped by the error of an agent that ended.
var ErrExited = errors.New("agent ended")

// Start spawns the agent and initialises it. On error nothing is left
// running.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("agent: empty command")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = DefaultMaxLine
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	started := false
	defer func() {
		if !started {
			if cfg.Group != nil {
				cfg.Group.Close()
			}
			closeAll(cfg.Closers)
		}
	}()
	nice := 0
	if cfg.Nice > 0 {
		own, err := ownNice()
		if err != nil {
			return nil, fmt.Errorf("agent: the gateway's CPU priority: %w", err)
		}
		nice = min(own+cfg.Nice, MaxNice)
	}
	fs, err := newFileServer(cfg.Dir, cfg.Workspace)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	var hold *os.File
	// With a Group or a Nice the agent waits, as a shell, until it is in
	// the Group and at its priority (settle): it runs nothing of its own
	// before, so nothing it starts can leave either first.
	if cfg.Group != nil || cfg.Nice > 0 {
		// The shell below would only say "not found" on its stderr.
		if _, err := exec.LookPath(cfg.Command[0]); err != nil {
			fs.close()
			return nil, fmt.Errorf("agent: start %s: %w", cfg.Command[0], err)
		}
		var holdR *os.File
		if holdR, hold, err = os.Pipe(); err != nil {
			fs.close()
			return nil, err
		}
		defer holdR.Close()
		defer hold.Close()
		// After the workspace, if any.
		holdFD := 3
		if cfg.Workspace != nil {
			holdFD++
		}
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(holdScript, holdFD)}, cfg.Command...)...)
		cmd.ExtraFiles = []*os.File{holdR}
	}
	if cfg.Workspace != nil {
		cmd.ExtraFiles = append([]*os.File{cfg.Workspace}, cmd.ExtraFiles...)
	}
	cmd.Dir = cfg.Dir
	// Only what the configuration gives: a nil Env would make exec pass
	// on the gateway's whole environment.
	cmd.Env = append([]string{}, cfg.Env...)
	cmd.SysProcAttr = procAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fs.close()
		return nil, err
	}
	// The gateway owns the read ends of stdout and stderr, so that Wait,
	// which closes the pipes it made, never cuts a read short.
	outR, outW, err := os.Pipe()
	if err != nil {
		fs.close()
		return nil, err
	}
	growPipe(outR)
	errR, errW, err := os.Pipe()
	if err != nil {
		fs.close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = startChild(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		fs.close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("agent: start %s: %w", cfg.Command[0], err)
	}
	if err := settle(cmd.Process.Pid, cfg, nice, hold); err != nil {
		// Closing hold ends a waiting shell.
		if hold != nil {
			hold.Close()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		forgetChild(cmd)
		stdin.Close()
		fs.close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("agent: start %s: %w", cfg.Command[0], err)
	}
	started = true // a.Close closes the Group from here on
	a := &Agent{cfg: cfg, cmd: cmd, fs: fs, out: outR, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	a.ended, a.setEnded = context.WithCancel(context.Background())
	a.cfg.Log.Info("agent started", "pid", cmd.Process.Pid)
	if cfg.Fence != nil {
		cfg.Fence(a)
	}

	go func() {
		defer close(a.stderrDone)
		defer errR.Close()
		a.logStderr(errR)
	}()
	// The agent ends when this goroutine reaps it, or earlier when its
	// output breaks (see streamEnded): no goroutine waits for either.
	go func() {
		awaitExit(cmd.Process.Pid)
		err := cmd.Wait()
		forgetChild(cmd)
		how, reason := describeExit(err)
		// Before exited is closed, after which Close removes the group.
		if cfg.Group != nil && cfg.Group.OOMKilled() {
			how, reason = "out of memory: it used more than its memory limit and was killed", ReasonOOM
		}
		close(a.exited)
		a.finish(fmt.Errorf("%w: %s", ErrExited, how), reason)
	}()

	var out io.Reader = holdingReader{a}
	in := stdin
	if cfg.BytesIn != nil {
		out = countingReader{out, cfg.BytesIn}
	}
	if cfg.BytesOut != nil {
		in = countingWriter{in, cfg.BytesOut}
	}
	a.connect(out, in, a.streamEnded)

	startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	if err := a.initialize(startCtx); err != nil {
		a.Close()
		if errors.Is(startCtx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("agent: no answer to initialize within %v", cfg.StartTimeout)
		}
		return nil, &StartError{Err: err, Stderr: a.StderrTail()}
	}
	return a, nil
}

// StderrTail returns the last lines of the agent's stderr
// (StderrTailLines, StderrTailBytes), for an agent that has ended: once its
// stderr has ended too, or after StopGrace when a process it left holds
// it open. Like [StartError.Stderr], it is for the session's own user.
func (a *Agent) StderrTail() string {
	t := time.NewTimer(a.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-a.stderrDone:
	case <-t.C:
	}
	return a.tail.String()
}

// connect starts the JSON-RPC connection over the agent's output and
// input; onEnd is told, in the read loop, why reading the output ended.
func (a *Agent) connect(out io.Reader, in io.WriteCloser, onEnd func(error)) {
	a.updates = newUpdateQueue(a.cfg.Client)
	a.stream = newLineStream(out, in, a.cfg.MaxLine, a.updateLine)
	a.stream.settle = a.updates.drain
	a.stream.onEnd = onEnd
	a.stream.gate = a.gate
	// jsonrpc2's own logging is silenced: the package logs what matters.
	a.conn = jsonrpc2.NewConn(context.Background(), a.stream, handler{a},
		jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
}

// streamEnded is called once, in the read loop, when reading the agent's
// output ends with err. A protocol error ends the agent at once; closed
// output means the process is exiting, and its exit status is reported
// unless it has not come within StopGrace.
func (a *Agent) streamEnded(err error) {
	if !errors.Is(err, io.EOF) {
		a.finish(fmt.Errorf("%w: protocol error: %v", ErrExited, err), ReasonProtocolError)
		return
	}
	go func() {
		t := time.NewTimer(a.cfg.StopGrace)
		defer t.Stop()
		select {
		case <-a.exited: // the reaper reports the exit
		case <-t.C:
			a.finish(fmt.Errorf("%w: closed its output", ErrExited), ReasonExited)
		}
	}()
}

// finish ends the agent with err (not nil) the first time it is called:
// it records why, cancels ended (closing Done) and runs the OnDone function.
func (a *Agent) finish(err error, reason string) {
	a.endMu.Lock()
	if a.err != nil {
		a.endMu.Unlock()
		return
	}
	if a.closing.Load() && reason != ReasonProtocolError && reason != ReasonOOM {
		reason = ReasonStopped
	}
	a.err, a.reason = err, reason
	a.setEnded()
	f := a.onDone
	a.endMu.Unlock()
	a.cfg.Log.Info("agent ended", "reason", err.Error())
	if f != nil {
		go f()
	}
}

// OnDone arranges for f to run, in a goroutine of its own, once the agent
// has ended (at once if it has): a way to learn of its end without a
// goroutine waiting on [Agent.Done]. The agent keeps one such function: f
// replaces one given earlier that has not run.
func (a *Agent) OnDone(f func()) {
	a.endMu.Lock()
	defer a.endMu.Unlock()
	if a.err != nil {
		go f()
		return
	}
	a.onDone = f
}

// Reasons an agent ended, as [Agent.Reason] gives them.
const (
	// ReasonStopped: the gateway ended it (Close).
	ReasonStopped = "stopped"
	// ReasonExited: it exited with status 0, or closed its output, on its own.
	ReasonExited = "exited"
	// ReasonFailed: it exited with a non-zero status.
	ReasonFailed = "failed"
	// ReasonKilled: a signal the gateway did not send ended it.
	ReasonKilled = "killed"
	// ReasonProtocolError: its output broke the protocol (a line too long,
	// a line that is not JSON).
	ReasonProtocolError = "protocol_error"
	// ReasonOOM: it used more memory than its Group may, and was killed.
	ReasonOOM = "oom"
)

// describeExit explains a process's exit, with the reason it counts as.
func describeExit(err error) (string, string) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String(), ReasonKilled
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode()), ReasonFailed
	}
	if err != nil {
		return err.Error(), ReasonFailed
	}
	return "exited with status 0", ReasonExited
}

// Reason says in one word why the agent ended (one of the Reason
// constants), or "" while it runs.
func (a *Agent) Reason() string {
	a.endMu.Lock()
	defer a.endMu.Unlock()
	return a.reason
}

// Done is closed when the agent has ended: its process exited or its
// output broke the protocol.
func (a *Agent) Done() <-chan struct{} { return a.ended.Done() }

// Err says why the agent ended, or nil while it runs.
func (a *Agent) Err() error {
	a.endMu.Lock()
	defer a.endMu.Unlock()
	return a.err
}

// Version is the ACP version the agent negotiated.
func (a *Agent) Version() acpjson.Version { return acpjson.Version(a.version.Load()) }

// Resume re-attaches to the agent's session id with session/resume, which
// does not replay the conversation.
func (a *Agent) Resume(ctx context.Context, sessionID, cwd string) (SessionSetup, error) {
	return a.reopen(ctx, "session/resume", map[string]any{"sessionId": sessionID, "cwd": cwd})
}

// ResumeReplay re-attaches to the agent's session id with ACP v2
// session/resume asking for the whole conversation (replayFrom
// {"type":"start"}), which the agent replays as session/update
// notifications before it answers, as for Load. An agent of another
// version gets nothing: ErrUnsupported.
func (a *Agent) ResumeReplay(ctx context.Context, sessionID, cwd string) (SessionSetup, error) {
	if a.Version() < acpjson.V2 {
		return SessionSetup{}, ErrUnsupported
	}
	return a.reopen(ctx, "session/resume", map[string]any{"sessionId": sessionID, "cwd": cwd,
		"replayFrom": map[string]any{"type": "start"}})
}

// Load re-attaches to the agent's session id with session/load. The agent
// replays the conversation as session/update notifications before it
// answers; the Client decides what to do with them.
func (a *Agent) Load(ctx context.Context, sessionID, cwd string) (SessionSetup, error) {
	return a.reopen(ctx, "session/load", map[string]any{"sessionId": sessionID, "cwd": cwd})
}

// reopen calls method (session/resume or session/load) with params and
// the session's MCP servers.
func (a *Agent) reopen(ctx context.Context, method string, params map[string]any) (SessionSetup, error) {
	params["mcpServers"] = a.mcpParam()
	var res setupResult
	if err := a.call(ctx, method, params, &res); err != nil {
		return SessionSetup{}, err
	}
	return res.decode(a.Version()), nil
}

// ListedSession is one of the sessions an agent lists (ACP SessionInfo).
type ListedSession struct {
	ID  string `json:"sessionId"`
	Cwd string `json:"cwd"`
	// Title and UpdatedAt (ISO 8601) are empty when the agent gave none.
	Title     string `json:"title"`
	UpdatedAt string `json:"updatedAt"`
}

// ListSessions asks the agent for one page of the sessions it keeps
// (session/list), after cursor ("" for the first page); next is the
// cursor of the page after it, "" for none. An agent that does not offer
// session/list gets nothing: ErrUnsupported.
func (a *Agent) ListSessions(ctx context.Context, cursor string) (_ []ListedSession, next string, _ error) {
	if !a.Capabilities().List {
		return nil, "", ErrUnsupported
	}
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	var res struct {
		Sessions   []json.RawMessage `json:"sessions"`
		NextCursor *string           `json:"nextCursor"`
	}
	if err := a.call(ctx, "session/list", params, &res); err != nil {
		return nil, "", err
	}
	out := make([]ListedSession, 0, len(res.Sessions))
	for _, raw := range res.Sessions {
		// ACP skips the items that do not decode, and so does this.
		var ls ListedSession
		if json.Unmarshal(raw, &ls) == nil && ls.ID != "" {
			out = append(out, ls)
		}
	}
	if res.NextCursor != nil {
		next = *res.NextCursor
	}
	return out, next, nil
}

// SessionSetup is what an agent's answer to session/new, session/resume
// or session/load says of the session: its modes and its configuration
// options, each nil when the answer has none (or they do not decode).
type SessionSetup struct {
	Modes         *acpv2.SessionModeState
	ConfigOptions []*acpv2.SessionConfigOption
}

// setupResult is the part of those answers that SessionSetup decodes.
type setupResult struct {
	Modes         json.RawMessage `json:"modes"`
	ConfigOptions json.RawMessage `json:"configOptions"`
}

// decode decodes r for an agent of version v. What does not decode is
// left out: the session works without it.
func (r setupResult) decode(v acpjson.Version) SessionSetup {
	var out SessionSetup
	if len(r.Modes) > 0 && string(r.Modes) != "null" {
		m := &acpv2.SessionModeState{}
		if acpjson.Decode(r.Modes, m, v) == nil {
			out.Modes = m
		}
	}
	if len(r.ConfigOptions) > 0 && string(r.ConfigOptions) != "null" {
		u := &acpv2.ConfigOptionUpdate{}
		if acpjson.Decode([]byte(`{"configOptions":`+string(r.ConfigOptions)+`}`), u, v) == nil {
			out.ConfigOptions = u.GetConfigOptions()
			if out.ConfigOptions == nil {
				out.ConfigOptions = []*acpv2.SessionConfigOption{}
			}
		}
	}
	return out
}

// SetMode sends session/set_mode (ACP v1; v2 has no such method).
func (a *Agent) SetMode(ctx context.Context, sessionID, modeID string) error {
	if a.Version() != acpjson.V1 {
		return ErrUnsupported
	}
	return a.call(ctx, "session/set_mode", map[string]any{"sessionId": sessionID, "modeId": modeID}, nil)
}

// SetConfigOption sends session/set_config_option with value (a string
// value id or a bool) and returns the options the agent reports.
func (a *Agent) SetConfigOption(ctx context.Context, sessionID, configID string, value any) (json.RawMessage, error) {
	params := map[string]any{"sessionId": sessionID, "configId": configID, "value": value}
	switch value.(type) {
	case bool:
		params["type"] = "boolean"
	case string:
		if a.Version() != acpjson.V1 {
			params["type"] = "id"
		}
	default:
		return nil, fmt.Errorf("agent: config option value of type %T", value)
	}
	var res struct {
		ConfigOptions json.RawMessage `json:"configOptions"`
	}
	if err := a.call(ctx, "session/set_config_option", params, &res); err != nil {
		return nil, err
	}
	return res.ConfigOptions, nil
}

// ErrUnsupported is returned for a method the agent's protocol version does
// not have.
var ErrUnsupported = errors.New("agent: the agent's ACP version has no such method")

// call makes a request and fails fast when the agent ends meanwhile.
func (a *Agent) call(ctx context.Context, method string, params, result any) error {
	return a.callSent(ctx, method, params, result, nil)
}

// callSent is call, running sent (when set) once the request is written to
// the agent and before its answer is awaited.
func (a *Agent) callSent(ctx context.Context, method string, params, result any, sent func()) error {
	caller := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(a.ended, cancel)()
	id := jsonrpc2.ID{Num: a.callID.Add(1)}
	w, err := a.conn.DispatchCall(ctx, method, params, jsonrpc2.PickID(id))
	if err == nil {
		if sent != nil {
			sent()
		}
		err = w.Wait(ctx, result)
		if caller.Err() != nil && a.ended.Err() == nil && method != "session/prompt" {
			a.withdraw(id)
		}
	}
	if err != nil {
		if errors.Is(err, jsonrpc2.ErrClosed) {
			// The connection broke: report why, once the agent is known
			// to have ended (see streamEnded). A call cancelled by the
			// agent's end finds Err set already, and one its caller
			// cancelled has nothing to wait for.
			select {
			case <-a.ended.Done():
			case <-time.After(2 * a.cfg.StopGrace):
			}
		}
		if derr := a.Err(); derr != nil {
			return derr
		}
		var rpcErr *jsonrpc2.Error
		if errors.As(err, &rpcErr) {
			return &RPCError{Method: method, Code: rpcErr.Code, Message: rpcErr.Message}
		}
	}
	return err
}

// withdraw tells the agent that the gateway no longer waits for the answer
// to its request id, whose caller went away ($/cancel_request). A turn is
// cancelled with session/cancel instead, as ACP orders. The write is made
// apart from the caller: an agent that does not read its input would block
// it until the agent ends.
func (a *Agent) withdraw(id jsonrpc2.ID) {
	go func() {
		_ = a.conn.Notify(context.Background(), "$/cancel_request", map[string]any{"requestId": id})
	}()
}

// CodeAuthRequired is the JSON-RPC error code with which an ACP agent
// refuses to work before authentication.
const CodeAuthRequired = -32000

// RPCError is an error the agent answered a request with.
type RPCError struct {
	Method  string
	Code    int64
	Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("agent answered %s with error %d: %s", e.Method, e.Code, e.Message)
}

// NewSession creates a session at the agent and returns its id.
func (a *Agent) NewSession(ctx context.Context, cwd string) (string, error) {
	sid, _, err := a.NewSessionSetup(ctx, cwd)
	return sid, err
}

// NewSessionSetup is NewSession that also returns what the agent's
// answer says of the session.
func (a *Agent) NewSessionSetup(ctx context.Context, cwd string) (string, SessionSetup, error) {
	var res struct {
		SessionID string `json:"sessionId"`
		setupResult
	}
	if err := a.call(ctx, "session/new", map[string]any{"cwd": cwd, "mcpServers": a.mcpParam()}, &res); err != nil {
		return "", SessionSetup{}, err
	}
	if res.SessionID == "" {
		return "", SessionSetup{}, errors.New("agent: session/new returned no sessionId")
	}
	return res.SessionID, res.decode(a.Version()), nil
}

// Prompt sends a prompt turn and waits for its stop reason, which is empty
// when the agent's answer has none. sent, when set, runs once the
// session/prompt request is written, so that a caller can order a
// session/cancel after it.
func (a *Agent) Prompt(ctx context.Context, sessionID string, prompt []*acpv2.ContentBlock, sent func()) (string, error) {
	blocks := make([]json.RawMessage, len(prompt))
	for i, b := range prompt {
		js, err := acpjson.Encode(b, a.Version())
		if err != nil {
			return "", fmt.Errorf("prompt block %d: %w", i, err)
		}
		blocks[i] = js
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	params := map[string]any{"sessionId": sessionID, "prompt": blocks}
	if meta := traceMeta(ctx); meta != nil {
		params["_meta"] = meta
	}
	if err := a.callSent(ctx, "session/prompt", params, &res, sent); err != nil {
		return "", err
	}
	// Empty from an ACP v2 agent, which reports the stop reason in an idle
	// state_update instead.
	return res.StopReason, nil
}

// Cancel sends session/cancel for sessionID.
func (a *Agent) Cancel(ctx context.Context, sessionID string) error {
	return a.conn.Notify(ctx, "session/cancel", map[string]any{"sessionId": sessionID})
}

// CloseSession asks the agent to end its session sessionID and free what
// it holds for it (session/close), when the agent offers that; it returns
// ErrUnsupported otherwise.
func (a *Agent) CloseSession(ctx context.Context, sessionID string) error {
	if !a.Capabilities().Close {
		return ErrUnsupported
	}
	return a.call(ctx, "session/close", map[string]any{"sessionId": sessionID}, nil)
}

// DeleteSession asks the agent to delete its history of session sessionID
// (session/delete), when the agent offers that; it returns ErrUnsupported
// otherwise.
func (a *Agent) DeleteSession(ctx context.Context, sessionID string) error {
	if !a.Capabilities().Delete {
		return ErrUnsupported
	}
	return a.call(ctx, "session/delete", map[string]any{"sessionId": sessionID}, nil)
}

// Close ends the agent: it closes stdin, then after StopGrace sends SIGTERM
// to the process group, then after StopGrace again SIGKILL, and waits until
// the process is reaped. Whatever else is left in the group is killed.
func (a *Agent) Close() {
	a.closeOnce.Do(func() {
		a.closing.Store(true)
		if a.Frozen() {
			// A frozen agent cannot end on its own, and must not run again.
			a.Kill()
		}
		_ = a.conn.Close() // closes the agent's stdin
		pgid := a.cmd.Process.Pid
		select {
		case <-a.exited:
		case <-time.After(a.cfg.StopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-a.exited:
			case <-time.After(a.cfg.StopGrace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-a.exited
			}
		}
		// Children the agent left behind in its group, and, with a Group,
		// those that left the process group (setsid, double forks).
		killGroup(pgid, a.cfg.StopGrace)
		if a.cfg.Group != nil {
			a.cfg.Group.Close()
		}
		closeAll(a.cfg.Closers)
		<-a.ended.Done()
		_ = a.out.Close()
		a.fs.close()
	})
}

// readLine reads one line, keeping at most max bytes of it.
func readLine(br *bufio.Reader, max int) (string, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if room := max - len(buf); room > 0 {
			buf = append(buf, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		for len(buf) > 0 && (buf[len(buf)-1] == '\n' || buf[len(buf)-1] == '\r') {
			buf = buf[:len(buf)-1]
		}
		return string(buf), err
	}
}

// deferred is returned by handle for a request it answers later.
type deferred struct{}

// sessionUpdateMethod, quoted, is in every session/update line.
var sessionUpdateMethod = []byte(`"session/update"`)

// updateLine takes a line that is a session/update notification, and
// queues its update for the Client, decoded in one pass over the line
// ([acpjson.DecodeNotification]). It leaves any other line, and any
// notification not plainly shaped, to jsonrpc2 and handle, which decode
// such an update as well, only slower. It runs in the read loop.
func (a *Agent) updateLine(line []byte) bool {
	if !bytes.Contains(line, sessionUpdateMethod) {
		return false
	}
	n, ok := acpjson.DecodeNotification(line, a.Version())
	if !ok {
		return false
	}
	a.updates.push(Update{AgentSessionID: n.SessionID, Update: n.Update, Err: n.Err})
	return true
}

// handler adapts Agent.handle to jsonrpc2.Handler.
type handler struct{ a *Agent }

// Handle implements jsonrpc2.Handler. It runs in the read loop, as
// updateLine does, so what the agent sends is handled in its order.
func (h handler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	result, err := h.a.handle(ctx, conn, req)
	if _, later := result.(deferred); req.Notif || later {
		return
	}
	if err != nil {
		var rpcErr *jsonrpc2.Error
		if !errors.As(err, &rpcErr) {
			rpcErr = &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: err.Error()}
		}
		_ = conn.ReplyWithError(ctx, req.ID, rpcErr)
		return
	}
	_ = conn.Reply(ctx, req.ID, result)
}

// handle serves the agent's requests to the client.
func (a *Agent) handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	switch req.Method {
	case "initialize":
		// No agent asks its client this: the gateway's own request, sent
		// back (see initialize).
		a.echoed.Store(true)
	case "session/update":
		// Only what updateLine leaves: requests, and odd notifications.
		var p struct {
			SessionID string          `json:"sessionId"`
			Update    json.RawMessage `json:"update"`
		}
		if err := json.Unmarshal(params, &p); err != nil || len(p.Update) == 0 {
			a.cfg.Log.Warn("agent sent a malformed session/update", "error", err)
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "session/update needs params.update"}
		}
		u, err := acpjson.DecodeUpdate(p.Update, a.Version())
		if err != nil {
			u = acpjson.KeepUnknown(p.Update)
		}
		a.cfg.Client.SessionUpdates([]Update{{AgentSessionID: p.SessionID, Update: u, Err: err}})
		return nil, nil
	case "session/request_permission":
		ch, withdraw, err := a.cfg.Client.RequestPermission(params)
		if err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: err.Error()}
		}
		return a.answerLater(conn, req.ID, withdraw, func() []byte {
			outcome, ok := <-ch
			if !ok || outcome == nil {
				outcome = &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
			}
			return acpjson.EncodePermissionResponse(outcome)
		}), nil
	case "elicitation/create":
		ch, withdraw, err := a.cfg.Client.Elicit(params)
		if err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: err.Error()}
		}
		return a.answerLater(conn, req.ID, withdraw, func() []byte {
			res, ok := <-ch
			if !ok || res == nil {
				res = &acpv2.ElicitationResolved{Action: acpjson.ElicitCancel}
			}
			return acpjson.EncodeElicitationResponse(res)
		}), nil
	case "elicitation/complete":
		a.cfg.Client.ElicitationComplete(params)
		return nil, nil
	case "$/cancel_request":
		// The agent withdraws a request of its own: only a permission
		// request or an elicitation waits for an answer here.
		var p struct {
			RequestID *jsonrpc2.ID `json:"requestId"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.RequestID == nil {
			a.cfg.Log.Warn("agent sent a malformed $/cancel_request", "error", err)
			return nil, nil
		}
		if w, ok := a.asked.Load(*p.RequestID); ok {
			(*w.(*func()))()
		}
		return nil, nil
	case "fs/read_text_file":
		return a.fs.read(params)
	case "fs/write_text_file":
		return a.fs.write(params)
	}
	if strings.HasPrefix(req.Method, "terminal/") {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound,
			Message: "terminals are not offered by this gateway (clientCapabilities.terminal is false)"}
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not supported by the gateway: " + req.Method}
}

// answerLater answers the agent's request id with what answer returns,
// from a goroutine of its own, and returns deferred. withdraw, when set,
// is called if the agent withdraws the request ($/cancel_request) first.
func (a *Agent) answerLater(conn *jsonrpc2.Conn, id jsonrpc2.ID, withdraw func(), answer func() []byte) deferred {
	// By pointer: a request id the agent reuses while the first is
	// pending is the second's, and the first's end leaves it alone.
	w := &withdraw
	if withdraw != nil {
		a.asked.Store(id, w)
	}
	go func() {
		defer a.asked.CompareAndDelete(id, w)
		res := json.RawMessage(answer())
		_ = conn.Reply(context.Background(), id, &res)
	}()
	return deferred{}
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// killGroup sends SIGKILL to process group pgid and waits, at most wait,
// until no process of the group is left alive.
func killGroup(pgid int, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for syscall.Kill(-pgid, syscall.SIGKILL) == nil && procfs.GroupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}
