package agentsim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sourcegraph/jsonrpc2"
)

// SessionIDPrefix starts every session id the agent makes: session/new
// number n of a process (counting from 1) answers SessionIDPrefix+n.
const SessionIDPrefix = "sim-session-"

// CodeAuthRequired is the JSON-RPC error code of session/new and session/load
// before a needed authenticate, ACP's "authentication required".
const CodeAuthRequired = -32000

// ExitError is returned by [Serve] when a [Step.Exit] ran and the exit
// function returned (see [WithExit]).
type ExitError struct {
	// Code is the status the step exited with.
	Code int
}

// Error returns a message naming the exit status.
func (e *ExitError) Error() string {
	return "agentsim: exited with status " + strconv.Itoa(e.Code)
}

// Serve runs the agent on in and out until in is closed (or fails), ctx ends
// or a [Step.Exit] ran; stderr receives the lines of [Step.Stderr] and the
// agent's own diagnostics (it may be nil). Serve closes in and out when they
// implement io.Closer, so that a blocked read ends with ctx, and returns
// once the agent's goroutines ended.
//
// Serve returns an error when s is not valid (see [Script.Validate]), an
// [*ExitError] after an exit step, ctx.Err() when ctx ended, and nil when in
// was closed.
func Serve(ctx context.Context, in io.Reader, out io.Writer, s Script, stderr io.Writer, opts ...Option) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if stderr == nil {
		stderr = io.Discard
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	a := &agent{
		script:   s,
		cfg:      newConfig(opts),
		ctx:      actx,
		stop:     stop,
		out:      &syncWriter{w: out},
		stderr:   &syncWriter{w: stderr},
		sessions: map[string]*session{},
	}
	a.logger = log.New(a.stderr, "agentsim: ", 0)
	stream := &stdio{in: in, out: a.out, rawOut: out}
	conn := jsonrpc2.NewConn(actx, jsonrpc2.NewPlainObjectStream(stream), a, jsonrpc2.SetLogger(a.logger))

	select {
	case <-actx.Done():
	case <-conn.DisconnectNotify():
	}
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	stop()
	_ = conn.Close()
	a.wg.Wait()

	a.mu.Lock()
	code := a.exitCode
	a.mu.Unlock()
	if code != nil {
		return &ExitError{Code: *code}
	}
	return ctx.Err()
}

// agent is the state of one Serve call.
type agent struct {
	script Script
	cfg    config
	ctx    context.Context // ends when Serve stops
	stop   context.CancelFunc
	out    *syncWriter
	stderr *syncWriter
	logger *log.Logger
	wg     sync.WaitGroup

	// hung is set by a hang or exit step: nothing more is answered.
	hung atomic.Bool

	mu            sync.Mutex
	closing       bool
	authenticated bool
	newSessions   int
	prompts       int
	sessions      map[string]*session
	exitCode      *int
}

type session struct {
	id  string
	cwd string
	// mcp is the mcpServers parameter that made the session known.
	mcp json.RawMessage
	// active maps the turns in progress to the functions cancelling them.
	active map[*run]context.CancelFunc
}

// spawn runs f in a goroutine Serve waits for; it reports false when Serve
// is stopping.
func (a *agent) spawn(f func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return false
	}
	a.wg.Go(f)
	return true
}

func (a *agent) stopped() bool {
	if a.hung.Load() {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

// exit runs an exit step.
func (a *agent) exit(code int) {
	a.hung.Store(true)
	a.cfg.exit(code)
	a.mu.Lock()
	a.exitCode = &code
	a.mu.Unlock()
	a.stop()
}

// Handle implements jsonrpc2.Handler. It runs on the connection's read loop,
// so requests are handled in arrival order; only initialize (which may play
// startup steps) and the turns of session/prompt run in their own goroutines,
// which keeps the read loop free for session/cancel and for the client's
// answers.
func (a *agent) Handle(_ context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if a.stopped() {
		return
	}
	switch req.Method {
	case "initialize":
		a.spawn(func() { a.initialize(conn, req) })
	case "authenticate", "auth/login":
		// v1 authenticate, v2 auth/login: each only in its version.
		if (req.Method == "auth/login") != (a.protocolVersion() >= 2) {
			a.methodNotFound(conn, req)
			return
		}
		a.authenticate(conn, req)
	case "logout", "auth/logout":
		// v1 logout, v2 auth/logout: each only in its version.
		if !a.script.Logout || (req.Method == "auth/logout") != (a.protocolVersion() >= 2) {
			a.methodNotFound(conn, req)
			return
		}
		a.logout(conn, req)
	case "session/new":
		a.newSession(conn, req)
	case "session/load":
		if !a.script.LoadSession {
			a.methodNotFound(conn, req)
			return
		}
		a.spawn(func() { a.loadSession(conn, req) })
	case "session/resume":
		if !a.script.Resume {
			a.methodNotFound(conn, req)
			return
		}
		a.spawn(func() { a.resumeSession(conn, req) })
	case "session/list":
		if !a.script.List {
			a.methodNotFound(conn, req)
			return
		}
		a.listSessions(conn, req)
	case "session/prompt":
		a.prompt(conn, req)
	case "session/cancel":
		a.cancel(req)
		a.reply(conn, req, nil)
	case "session/close", "session/delete":
		if !map[string]bool{"session/close": a.script.Close, "session/delete": a.script.Delete}[req.Method] {
			a.methodNotFound(conn, req)
			return
		}
		a.endSession(conn, req)
	case "session/set_mode":
		a.setMode(conn, req)
	case "session/set_config_option":
		a.setConfigOption(conn, req)
	default:
		a.methodNotFound(conn, req)
	}
}

func (a *agent) initialize(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	r := &run{a: a, conn: conn, ctx: a.ctx, sess: &session{}}
	if o, err := r.play(a.script.Startup); err != nil {
		a.fail(conn, req, err)
		return
	} else if o != next {
		return
	}
	pv := a.protocolVersion()
	methods := make([]authMethod, 0, len(a.script.AuthMethods))
	for _, m := range a.script.AuthMethods {
		if pv >= 2 {
			methods = append(methods, authMethod{MethodID: m, Name: m, Type: "agent"})
		} else {
			methods = append(methods, authMethod{ID: m, Name: m})
		}
	}
	res := initializeResult{
		ProtocolVersion: pv,
		AgentCapabilities: agentCapabilities{
			LoadSession:        a.script.LoadSession,
			PromptCapabilities: a.script.PromptCapabilities,
		},
		AuthMethods: methods,
		AgentInfo:   implementation{Name: "agentsim", Title: "acp-gateway simulated agent", Version: "1"},
	}
	if pv >= 2 {
		res.Info = &res.AgentInfo
	}
	if a.script.Logout && pv < 2 {
		res.AgentCapabilities.Auth = &authCapabilities{Logout: &struct{}{}}
	}
	if a.script.Resume || a.script.Close || a.script.Delete || a.script.List {
		res.AgentCapabilities.SessionCapabilities = &sessionCapabilities{Resume: offer(a.script.Resume), Close: offer(a.script.Close),
			Delete: offer(a.script.Delete), List: offer(a.script.List)}
		res.Capabilities = &v2Capabilities{Session: &v2SessionCapabilities{Delete: offer(a.script.Delete)}}
	}
	if mc := a.script.MCPCapabilities; mc != (MCPCapabilities{}) {
		res.AgentCapabilities.MCPCapabilities = &mcpCapabilities{HTTP: mc.HTTP, SSE: mc.SSE}
		if res.Capabilities == nil {
			res.Capabilities = &v2Capabilities{Session: &v2SessionCapabilities{}}
		}
		res.Capabilities.Session.MCP = &v2MCPCapabilities{Stdio: offer(mc.Stdio), HTTP: offer(mc.HTTP)}
	}
	if pc := a.script.PromptCapabilities; pc != (PromptCapabilities{}) {
		if res.Capabilities == nil {
			res.Capabilities = &v2Capabilities{Session: &v2SessionCapabilities{}}
		}
		res.Capabilities.Session.Prompt = &v2PromptCapabilities{Image: offer(pc.Image), Audio: offer(pc.Audio), EmbeddedContext: offer(pc.EmbeddedContext)}
	}
	a.reply(conn, req, res)
}

func (a *agent) authenticate(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p struct {
		MethodID string `json:"methodId"`
	}
	if e := decodeParams(req, &p); e != nil {
		a.replyError(conn, req, e)
		return
	}
	for _, m := range a.script.AuthMethods {
		if m == p.MethodID {
			a.mu.Lock()
			a.authenticated = true
			a.mu.Unlock()
			a.reply(conn, req, struct{}{})
			return
		}
	}
	a.replyError(conn, req, invalidParams("unknown authentication method %q", p.MethodID))
}

// authError answers the auth_required error when authentication is needed
// and missing.
func (a *agent) authError() *jsonrpc2.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.script.AuthMethods) > 0 && !a.authenticated {
		return &jsonrpc2.Error{Code: CodeAuthRequired, Message: "Authentication required"}
	}
	return nil
}

func (a *agent) newSession(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if e := a.authError(); e != nil {
		a.replyError(conn, req, e)
		return
	}
	if e := a.script.NewSessionError; e != nil {
		a.replyError(conn, req, &jsonrpc2.Error{Code: e.Code, Message: e.Message})
		return
	}
	var p struct {
		Cwd string          `json:"cwd"`
		MCP json.RawMessage `json:"mcpServers"`
	}
	if e := decodeParams(req, &p); e != nil {
		a.replyError(conn, req, e)
		return
	}
	a.mu.Lock()
	a.newSessions++
	id := SessionIDPrefix + strconv.Itoa(a.newSessions)
	a.sessions[id] = &session{id: id, cwd: p.Cwd, mcp: p.MCP, active: map[*run]context.CancelFunc{}}
	a.mu.Unlock()
	a.reply(conn, req, struct {
		SessionID string `json:"sessionId"`
		sessionSetup
	}{id, a.setup()})
}

// sessionSetup is what the answers to session/new, session/resume and
// session/load say of the session besides its id.
type sessionSetup struct {
	Modes         json.RawMessage `json:"modes,omitempty"`
	ConfigOptions json.RawMessage `json:"configOptions,omitempty"`
}

func (a *agent) setup() sessionSetup {
	return sessionSetup{Modes: a.script.SessionModes, ConfigOptions: a.script.SessionConfigOptions}
}

// loadSession serves session/load: it plays LoadReplay, then answers.
func (a *agent) loadSession(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	a.reopenSession(conn, req, true)
}

// resumeSession serves session/resume, which replays nothing but in ACP
// v2 with replayFrom: then it plays LoadReplay, as session/load does.
func (a *agent) resumeSession(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p struct {
		ReplayFrom *struct {
			Type string `json:"type"`
		} `json:"replayFrom"`
	}
	_ = decodeParams(req, &p)
	replay := p.ReplayFrom != nil && a.protocolVersion() >= 2
	if replay && p.ReplayFrom.Type != "start" {
		a.replyError(conn, req, invalidParams("unknown replayFrom type %q", p.ReplayFrom.Type))
		return
	}
	a.reopenSession(conn, req, replay)
}

// reopenSession makes the session of a session/load or session/resume
// known, plays LoadReplay when replay is set, and answers.
func (a *agent) reopenSession(conn *jsonrpc2.Conn, req *jsonrpc2.Request, replay bool) {
	sess, e := a.reopen(req)
	if e != nil {
		a.replyError(conn, req, e)
		return
	}
	if replay {
		r := &run{a: a, conn: conn, ctx: a.ctx, sess: sess, cwd: sess.cwd}
		if o, err := r.play(a.script.LoadReplay); err != nil {
			a.fail(conn, req, err)
			return
		} else if o != next {
			return
		}
	}
	a.reply(conn, req, a.setup())
}

// listSessions serves session/list: a page of ListedSessions from the
// index the cursor names.
func (a *agent) listSessions(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if e := decodeParams(req, &p); e != nil {
		a.replyError(conn, req, e)
		return
	}
	all := a.script.ListedSessions
	from := 0
	if p.Cursor != "" {
		n, err := strconv.Atoi(p.Cursor)
		if err != nil || n < 0 || n > len(all) {
			a.replyError(conn, req, invalidParams("bad cursor %q", p.Cursor))
			return
		}
		from = n
	}
	to := len(all)
	if size := a.script.ListPageSize; size > 0 {
		to = min(from+size, len(all))
	}
	res := struct {
		Sessions   []ListedSession `json:"sessions"`
		NextCursor string          `json:"nextCursor,omitempty"`
	}{Sessions: append([]ListedSession{}, all[from:to]...)}
	if to < len(all) {
		res.NextCursor = strconv.Itoa(to)
	}
	a.reply(conn, req, res)
}

// reopen makes the session named by a session/load or session/resume
// request known to this process: a simulated agent keeps no history, so any
// id is accepted.
func (a *agent) reopen(req *jsonrpc2.Request) (*session, *jsonrpc2.Error) {
	if e := a.authError(); e != nil {
		return nil, e
	}
	var p struct {
		SessionID string          `json:"sessionId"`
		Cwd       string          `json:"cwd"`
		MCP       json.RawMessage `json:"mcpServers"`
	}
	if e := decodeParams(req, &p); e != nil {
		return nil, e
	}
	if p.SessionID == "" {
		return nil, invalidParams("missing sessionId")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[p.SessionID]
	if s == nil {
		s = &session{id: p.SessionID, active: map[*run]context.CancelFunc{}}
		a.sessions[p.SessionID] = s
	}
	s.cwd, s.mcp = p.Cwd, p.MCP
	return s, nil
}

// sessionOf returns the session named by the request's params.sessionId,
// decoding the rest of the params into p when it is not nil. When the
// params are bad or the session unknown it answers the error itself and
// reports false.
func (a *agent) sessionOf(conn *jsonrpc2.Conn, req *jsonrpc2.Request, p any) (*session, bool) {
	var id struct {
		SessionID string `json:"sessionId"`
	}
	e := decodeParams(req, &id)
	if e == nil && p != nil {
		e = decodeParams(req, p)
	}
	var sess *session
	if e == nil {
		sess, e = a.lookup(id.SessionID)
	}
	if e != nil {
		a.replyError(conn, req, e)
		return nil, false
	}
	return sess, true
}

// lookup returns the session named by the request's sessionId, or the error
// to answer.
func (a *agent) lookup(id string) (*session, *jsonrpc2.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[id]; s != nil {
		return s, nil
	}
	return nil, invalidParams("unknown session %q", id)
}

func (a *agent) prompt(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	sess, ok := a.sessionOf(conn, req, nil)
	if !ok {
		return
	}
	a.mu.Lock()
	n := a.prompts
	a.prompts++
	tctx, cancel := context.WithCancel(a.ctx)
	r := &run{a: a, conn: conn, ctx: tctx, sess: sess, cwd: sess.cwd}
	sess.active[r] = cancel
	a.mu.Unlock()

	var turn Turn
	if len(a.script.Turns) > 0 {
		turn = a.script.Turns[n%len(a.script.Turns)]
	}
	if a.script.EchoMeta {
		var p struct {
			Meta json.RawMessage `json:"_meta"`
		}
		if req.Params != nil {
			_ = json.Unmarshal(*req.Params, &p)
		}
		if len(p.Meta) == 0 {
			p.Meta = json.RawMessage("null")
		}
		echo := Step{Update: textChunk("agent_message_chunk", "_meta: "+string(p.Meta))}
		turn.Steps = append([]Step{echo}, turn.Steps...)
	}
	if a.script.EchoMCP {
		mcp := cmp.Or(string(sess.mcp), "null")
		echo := Step{Update: textChunk("agent_message_chunk", "mcpServers: "+mcp)}
		turn.Steps = append([]Step{echo}, turn.Steps...)
	}
	done := func() {
		a.mu.Lock()
		delete(sess.active, r)
		a.mu.Unlock()
		cancel()
	}
	ok = a.spawn(func() {
		defer done()
		o, err := r.play(turn.Steps)
		switch {
		case err != nil:
			a.fail(conn, req, err)
			return
		case o == aborted:
			return
		}
		stop := turn.StopReason
		if stop == "" {
			stop = DefaultStopReason
		}
		if o == cancelled || tctx.Err() != nil {
			stop = "cancelled"
		}
		if a.protocolVersion() >= 2 {
			// ACP v2 reports the end of a turn with an idle state_update;
			// the session/prompt answer only acknowledges the prompt.
			r.notifyIdle(stop)
			a.reply(conn, req, struct{}{})
			return
		}
		a.reply(conn, req, struct {
			StopReason string `json:"stopReason"`
		}{stop})
	})
	if !ok {
		done()
	}
}

func (a *agent) protocolVersion() int {
	if a.script.ProtocolVersion == 0 {
		return DefaultProtocolVersion
	}
	return a.script.ProtocolVersion
}

// endSession serves session/close and session/delete: the session's turns
// are cancelled, and the call noted in SessionsFile.
func (a *agent) endSession(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	if e := decodeParams(req, &p); e != nil {
		a.replyError(conn, req, e)
		return
	}
	a.cancel(req)
	if f := a.script.SessionsFile; f != "" {
		out, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			_, err = fmt.Fprintln(out, strings.TrimPrefix(req.Method, "session/"), p.SessionID)
			err = errors.Join(err, out.Close())
		}
		if err != nil {
			a.replyError(conn, req, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: err.Error()})
			return
		}
	}
	a.reply(conn, req, struct{}{})
}

// logout serves logout (v1) and auth/logout (v2): the authentication
// ends, and SessionsFile, when set, gets the line "logout".
func (a *agent) logout(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	a.mu.Lock()
	a.authenticated = false
	a.mu.Unlock()
	if f := a.script.SessionsFile; f != "" {
		out, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			_, err = fmt.Fprintln(out, "logout")
			err = errors.Join(err, out.Close())
		}
		if err != nil {
			a.replyError(conn, req, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: err.Error()})
			return
		}
	}
	a.reply(conn, req, struct{}{})
}

func (a *agent) cancel(req *jsonrpc2.Request) {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	if decodeParams(req, &p) != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[p.SessionID]; s != nil {
		for _, cancel := range s.active {
			cancel()
		}
	}
}

func (a *agent) setMode(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p struct {
		ModeID string `json:"modeId"`
	}
	sess, ok := a.sessionOf(conn, req, &p)
	if !ok {
		return
	}
	a.reply(conn, req, struct{}{})
	update, _ := json.Marshal(struct {
		SessionUpdate string `json:"sessionUpdate"`
		CurrentModeID string `json:"currentModeId"`
	}{"current_mode_update", p.ModeID})
	r := &run{a: a, conn: conn, ctx: a.ctx, sess: sess}
	if _, err := r.update(update); err != nil {
		a.logger.Printf("%v", err)
	}
}

func (a *agent) setConfigOption(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if _, ok := a.sessionOf(conn, req, nil); !ok {
		return
	}
	opts := a.script.ConfigOptions
	if len(opts) == 0 {
		opts = json.RawMessage("[]")
	}
	a.reply(conn, req, struct {
		ConfigOptions json.RawMessage `json:"configOptions"`
	}{opts})
}

func (a *agent) methodNotFound(conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	a.replyError(conn, req, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "Method not found: " + req.Method})
}

// fail answers req with an internal error describing err.
func (a *agent) fail(conn *jsonrpc2.Conn, req *jsonrpc2.Request, err error) {
	a.logger.Printf("%s: %v", req.Method, err)
	a.replyError(conn, req, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: err.Error()})
}

func (a *agent) reply(conn *jsonrpc2.Conn, req *jsonrpc2.Request, result any) {
	if req.Notif || a.hung.Load() {
		return
	}
	if err := conn.Reply(a.ctx, req.ID, result); err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
		a.logger.Printf("answering %s: %v", req.Method, err)
	}
}

func (a *agent) replyError(conn *jsonrpc2.Conn, req *jsonrpc2.Request, e *jsonrpc2.Error) {
	if req.Notif || a.hung.Load() {
		return
	}
	if err := conn.ReplyWithError(a.ctx, req.ID, e); err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
		a.logger.Printf("answering %s: %v", req.Method, err)
	}
}

func decodeParams(req *jsonrpc2.Request, v any) *jsonrpc2.Error {
	if req.Params == nil {
		return nil
	}
	if err := json.Unmarshal(*req.Params, v); err != nil {
		return invalidParams("%s: %v", req.Method, err)
	}
	return nil
}

func invalidParams(format string, args ...any) *jsonrpc2.Error {
	return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "Invalid params: " + fmt.Sprintf(format, args...)}
}

type initializeResult struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities agentCapabilities `json:"agentCapabilities"`
	// Capabilities is the ACP v2 name of agentCapabilities.
	Capabilities *v2Capabilities `json:"capabilities,omitempty"`
	AuthMethods  []authMethod    `json:"authMethods"`
	AgentInfo    implementation  `json:"agentInfo"`
	// Info is the ACP v2 name of agentInfo.
	Info *implementation `json:"info,omitempty"`
}

type agentCapabilities struct {
	LoadSession         bool                 `json:"loadSession"`
	PromptCapabilities  PromptCapabilities   `json:"promptCapabilities"`
	SessionCapabilities *sessionCapabilities `json:"sessionCapabilities,omitempty"`
	MCPCapabilities     *mcpCapabilities     `json:"mcpCapabilities,omitempty"`
	Auth                *authCapabilities    `json:"auth,omitempty"`
}

// authCapabilities are v1 agentCapabilities.auth.
type authCapabilities struct {
	Logout *struct{} `json:"logout,omitempty"`
}

type mcpCapabilities struct {
	HTTP bool `json:"http"`
	SSE  bool `json:"sse"`
}

// v2MCPCapabilities offers each MCP transport with an object.
type v2MCPCapabilities struct {
	Stdio *struct{} `json:"stdio,omitempty"`
	HTTP  *struct{} `json:"http,omitempty"`
}

type sessionCapabilities struct {
	Resume *struct{} `json:"resume,omitempty"`
	Close  *struct{} `json:"close,omitempty"`
	Delete *struct{} `json:"delete,omitempty"`
	List   *struct{} `json:"list,omitempty"`
}

type v2Capabilities struct {
	Session *v2SessionCapabilities `json:"session,omitempty"`
}

type v2SessionCapabilities struct {
	Prompt *v2PromptCapabilities `json:"prompt,omitempty"`
	MCP    *v2MCPCapabilities    `json:"mcp,omitempty"`
	Delete *struct{}             `json:"delete,omitempty"`
}

// v2PromptCapabilities offers each kind of content with an object.
type v2PromptCapabilities struct {
	Image           *struct{} `json:"image,omitempty"`
	Audio           *struct{} `json:"audio,omitempty"`
	EmbeddedContext *struct{} `json:"embeddedContext,omitempty"`
}

// offer is a v2 capability's value: {} when on, omitted when off.
func offer(on bool) *struct{} {
	if on {
		return &struct{}{}
	}
	return nil
}

// authMethod is an ACP v1 (id) or v2 (methodId, type) authentication
// method.
type authMethod struct {
	ID       string `json:"id,omitempty"`
	MethodID string `json:"methodId,omitempty"`
	Name     string `json:"name"`
	Type     string `json:"type,omitempty"`
}

type implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Version string `json:"version"`
}

type updateParams struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

// syncWriter serializes writes, so a raw line never interleaves with a
// JSON-RPC message (the JSON encoder writes each message in one Write).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// stdio joins the input and the output into the io.ReadWriteCloser the
// JSON-RPC stream needs.
type stdio struct {
	in     io.Reader
	out    io.Writer
	rawOut io.Writer
	closed atomic.Bool
	once   sync.Once
}

func (s *stdio) Read(b []byte) (int, error) {
	n, err := s.in.Read(b)
	if err != nil && s.closed.Load() {
		// A read ended by Close is the end of the input, not a protocol error.
		err = io.EOF
	}
	return n, err
}

func (s *stdio) Write(b []byte) (int, error) { return s.out.Write(b) }

func (s *stdio) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		// Close without taking the write lock: closing is what unblocks a
		// write stuck on a full pipe.
		if c, ok := s.in.(io.Closer); ok {
			_ = c.Close()
		}
		if c, ok := s.rawOut.(io.Closer); ok {
			_ = c.Close()
		}
	})
	return nil
}
