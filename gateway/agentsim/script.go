package agentsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultProtocolVersion is the protocol version answered at initialize when
// [Script.ProtocolVersion] is zero.
const DefaultProtocolVersion = 1

// DefaultStopReason is the stop reason of a turn whose [Turn.StopReason] is
// empty.
const DefaultStopReason = "end_turn"

// Script is what a simulated agent does.
type Script struct {
	// ProtocolVersion is answered at initialize; zero means
	// DefaultProtocolVersion.
	ProtocolVersion int `json:"protocolVersion"`
	// LoadSession advertises agentCapabilities.loadSession and serves
	// session/load, which replays nothing and returns {}. Without it
	// session/load is an unknown method.
	LoadSession bool `json:"loadSession"`
	// LoadReplay is played during session/load, and during an ACP v2
	// session/resume with replayFrom, before it is answered: an agent
	// replays the loaded conversation as session/update notifications.
	LoadReplay []Step `json:"loadReplay,omitempty"`
	// Resume advertises session/resume (ACP v1
	// agentCapabilities.sessionCapabilities.resume, v2 capabilities.session)
	// and serves it. Without it session/resume is an unknown method.
	Resume bool `json:"resume,omitempty"`
	// Close advertises session/close (ACP v1
	// agentCapabilities.sessionCapabilities.close; in v2 a baseline
	// method of capabilities.session) and serves it: the session's turns
	// are cancelled. Without it session/close is an unknown method.
	Close bool `json:"close,omitempty"`
	// Delete advertises session/delete (v1 sessionCapabilities.delete, v2
	// capabilities.session.delete) and serves it. Without it
	// session/delete is an unknown method.
	Delete bool `json:"delete,omitempty"`
	// List advertises session/list (ACP v1
	// agentCapabilities.sessionCapabilities.list; in v2 a baseline method
	// of capabilities.session, which it makes an object) and serves it
	// with ListedSessions, ListPageSize a page (all on one when zero),
	// each page's nextCursor naming the next. Without it session/list is
	// an unknown method.
	List           bool            `json:"list,omitempty"`
	ListedSessions []ListedSession `json:"listedSessions,omitempty"`
	ListPageSize   int             `json:"listPageSize,omitempty"`
	// SessionsFile, when set, gets a line "close ID" or "delete ID"
	// appended for each session/close and session/delete served, and
	// "logout" for each logout.
	SessionsFile string `json:"sessionsFile,omitempty"`
	// Logout advertises v1 logout (agentCapabilities.auth.logout) and
	// serves it, and serves v2 auth/logout, which v2 agents with
	// authentication methods offer without advertising it: either ends
	// the authentication, so that the next session/new needs it again.
	// Without it both are unknown methods.
	Logout bool `json:"logout,omitempty"`
	// ConfigOptions is the configOptions array that answers
	// session/set_config_option; empty means [].
	ConfigOptions json.RawMessage `json:"configOptions,omitempty"`
	// SessionModes and SessionConfigOptions, when set, are the `modes`
	// and `configOptions` of the answers to session/new, session/resume
	// and session/load (left out when empty).
	SessionModes         json.RawMessage `json:"sessionModes,omitempty"`
	SessionConfigOptions json.RawMessage `json:"sessionConfigOptions,omitempty"`
	// AuthMethods are the advertised authentication method ids (ACP v1
	// `id`; v2 `methodId`, of type `agent`). When it is not empty,
	// session/new and session/load fail with the JSON-RPC error code
	// -32000 (authentication required) until authentication succeeded
	// with one of them: authenticate in v1, auth/login in v2, each
	// unknown in the other version.
	AuthMethods []string `json:"authMethods,omitempty"`
	// PromptCapabilities are advertised at initialize: in ACP v1 as
	// agentCapabilities.promptCapabilities, in v2 as objects in
	// capabilities.session.prompt (which makes capabilities.session an
	// object, as Resume does). The agent takes any prompt whatever it
	// advertised.
	PromptCapabilities PromptCapabilities `json:"promptCapabilities,omitzero"`
	// NewSessionError, when set, answers every session/new (after any
	// authentication it needs) with this JSON-RPC error, as an agent
	// that refuses to make a session does.
	NewSessionError *RPCError `json:"newSessionError,omitempty"`
	// Startup is played when initialize arrives, before it is answered
	// (garbage, a stderr line, a slow start, an exit, a hang).
	Startup []Step `json:"startup,omitempty"`
	// Turns are played by the prompts: prompt number n of the process,
	// counting from 0, plays Turns[n % len(Turns)]. With no turns every
	// prompt ends at once with DefaultStopReason.
	Turns []Turn `json:"turns"`
	// EchoMeta starts each turn with an agent_message_chunk whose text is
	// "_meta: " and the session/prompt request's _meta as JSON ("null"
	// when it has none), so tests can see what the gateway passed on.
	EchoMeta bool `json:"echoMeta,omitempty"`
	// MCPCapabilities are the MCP server transports advertised at
	// initialize: in ACP v1 http and sse as
	// agentCapabilities.mcpCapabilities (stdio is baseline there), in v2
	// objects in capabilities.session.mcp (which makes
	// capabilities.session an object, as Resume does).
	MCPCapabilities MCPCapabilities `json:"mcpCapabilities,omitzero"`
	// EchoMCP starts each turn with an agent_message_chunk whose text is
	// "mcpServers: " and, as JSON, the mcpServers of the session/new,
	// session/load or session/resume that made the session known to this
	// process, so tests can see what the gateway passed on.
	EchoMCP bool `json:"echoMCP,omitempty"`
	// IgnoreEOF keeps the agent's process alive once its input closes,
	// ignoring SIGTERM, SIGHUP and SIGINT too, as a stuck agent would:
	// only SIGKILL ends it.
	IgnoreEOF bool `json:"ignoreEOF,omitempty"`
}

// ListedSession is one of the sessions session/list answers with (ACP
// SessionInfo); Title and UpdatedAt are left out when empty.
type ListedSession struct {
	SessionID string `json:"sessionId"`
	Cwd       string `json:"cwd"`
	Title     string `json:"title,omitempty"`
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// RPCError is a JSON-RPC error the agent answers with.
type RPCError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// PromptCapabilities say which content blocks beyond text and resource
// links an agent takes in a prompt.
type PromptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
}

// MCPCapabilities say which MCP server transports an agent takes.
type MCPCapabilities struct {
	Stdio bool `json:"stdio"`
	HTTP  bool `json:"http"`
	SSE   bool `json:"sse"`
}

// Turn is what the agent does for one session/prompt.
type Turn struct {
	// Steps are played in order.
	Steps []Step `json:"steps"`
	// StopReason answers the prompt when every step was played; empty means
	// DefaultStopReason. A cancelled turn always answers "cancelled". With
	// protocol version 2 it is sent in an idle state_update instead, and the
	// prompt's answer is {}.
	StopReason string `json:"stopReason,omitempty"`
}

// Step does exactly one thing; a step with no field set does nothing.
type Step struct {
	// Update is sent verbatim as params.update of a session/update
	// notification whose params.sessionId is the prompt's session.
	Update json.RawMessage `json:"update,omitempty"`
	// Permission sends session/request_permission and waits for the answer.
	Permission *Permission `json:"permission,omitempty"`
	// Elicit sends elicitation/create with these params (an object; its
	// sessionId is set to the prompt's session), waits for the answer, and
	// reports it as an agent_message_chunk text update "elicit <action>"
	// followed by " <content JSON>" when the answer has content, or
	// "elicit: <error message>". It uses Serve's context, as a permission
	// request does.
	Elicit json.RawMessage `json:"elicit,omitempty"`
	// Sleep pauses; session/cancel interrupts it at once. In JSON it is a Go
	// duration string such as "50ms".
	Sleep Duration `json:"sleep,omitempty"`
	// Raw is written to the output as is, followed by a newline, for example
	// garbage that is not JSON.
	Raw string `json:"raw,omitempty"`
	// Exit calls the exit function (os.Exit unless [WithExit] replaced it)
	// with this status. If the exit function returns, Serve stops and
	// returns an [*ExitError].
	Exit *int `json:"exit,omitempty"`
	// Hang stops the agent responding until the context ends or the input
	// closes: nothing more is answered or sent, and the prompt is never
	// answered.
	Hang bool `json:"hang,omitempty"`
	// Stderr writes this line to the stderr writer given to Serve.
	Stderr string `json:"stderr,omitempty"`
	// Env reports the agent's environment variable of this name as an
	// agent_message_chunk text update "env NAME=value", or "env NAME unset".
	Env string `json:"env,omitempty"`
	// ReadFile calls fs/read_text_file for this path and reports the result
	// as an agent_message_chunk text update "read <path>: <content>" or
	// "read <path>: <error message>".
	ReadFile string `json:"readFile,omitempty"`
	// WriteFile calls fs/write_text_file and reports "wrote <path>" or
	// "write <path>: <error message>" as an agent_message_chunk text update.
	WriteFile *WriteFile `json:"writeFile,omitempty"`
	// Terminal calls terminal/create with this command and reports
	// "terminal <id>" or "terminal: <error message>" as an
	// agent_message_chunk text update.
	Terminal string `json:"terminal,omitempty"`
	// Flood sends one update many times, as fast as the output takes them.
	Flood *Flood `json:"flood,omitempty"`
	// LongLine writes one session/update notification (an
	// agent_message_chunk whose text is padded with "x") that is this many
	// bytes long without its newline, or as short as such a notification
	// can be when that is longer. It tests a client's line limit.
	LongLine int `json:"longLine,omitempty"`
	// Shell runs this command with /bin/sh -c, as a coding agent runs its
	// tools, and reports "shell <exit status>: <output>" (stdout and
	// stderr, cut at 64 KiB) as an agent_message_chunk text update. The
	// hostile agents of the sandbox tests are made of it.
	Shell string `json:"shell,omitempty"`
	// RawBytes is written to the output as is, followed by a newline. Unlike
	// Raw it survives the script's JSON (as base64), so it can carry bytes
	// that are not valid UTF-8.
	RawBytes []byte `json:"rawBytes,omitempty"`
}

// Flood is an update sent Count times in a row.
type Flood struct {
	// Count is how many updates are sent.
	Count int `json:"count"`
	// Update is sent as params.update of each session/update; the
	// placeholder {{n}} in it is replaced by the update's number, counting
	// from 1.
	Update json.RawMessage `json:"update"`
}

// Permission is a session/request_permission call and what follows it.
//
// A "cancelled" outcome ends the turn with the stop reason "cancelled". A
// session/cancel that arrives while the request is pending leaves it pending:
// the client must answer it (ACP says with the cancelled outcome), and the
// turn then ends "cancelled" whatever the answer.
type Permission struct {
	// ToolCall is the ToolCallUpdate object sent as params.toolCall (ACP
	// v1); left out when empty.
	ToolCall json.RawMessage `json:"toolCall,omitempty"`
	// Title, Description and Subject are sent as params.title,
	// params.description and params.subject (ACP v2) when set.
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Subject     json.RawMessage `json:"subject,omitempty"`
	// Options is the PermissionOption array sent as params.options; empty
	// means DefaultPermissionOptions.
	Options json.RawMessage `json:"options,omitempty"`
	// Allowed is played when an option whose kind starts with "allow" was
	// selected.
	Allowed []Step `json:"allowed,omitempty"`
	// Rejected is played when an option whose kind starts with "reject" was
	// selected.
	Rejected []Step `json:"rejected,omitempty"`
}

// DefaultPermissionOptions are the options of a [Permission] without
// Options: "allow-once" (kind allow_once) and "reject-once" (kind
// reject_once).
const DefaultPermissionOptions = `[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},` +
	`{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]`

// WriteFile is an fs/write_text_file call.
type WriteFile struct {
	// Path is the file to write.
	Path string `json:"path"`
	// Content is the text to write.
	Content string `json:"content"`
}

// Duration is a time.Duration that JSON encodes as a Go duration string such
// as "50ms". It also decodes a JSON number as nanoseconds.
type Duration time.Duration

// String returns the duration formatted like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON decodes a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("agentsim: bad duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("agentsim: duration must be a string like \"50ms\" or nanoseconds: %w", err)
	}
	*d = Duration(n)
	return nil
}

// Validate reports the first problem of s: a step doing more than one thing,
// a negative sleep, an Update or ToolCall that is not a JSON object, Options
// that are not a JSON array.
func (s Script) Validate() error {
	if s.ProtocolVersion < 0 || s.ProtocolVersion > 65535 {
		return fmt.Errorf("agentsim: protocolVersion %d out of range", s.ProtocolVersion)
	}
	if err := validateSteps("startup", s.Startup); err != nil {
		return err
	}
	if err := validateSteps("loadReplay", s.LoadReplay); err != nil {
		return err
	}
	if len(s.ConfigOptions) > 0 {
		if err := jsonKind(s.ConfigOptions, '['); err != nil {
			return fmt.Errorf("agentsim: configOptions: %w", err)
		}
	}
	for i, t := range s.Turns {
		if err := validateSteps(fmt.Sprintf("turns[%d].steps", i), t.Steps); err != nil {
			return err
		}
	}
	return nil
}

func validateSteps(where string, steps []Step) error {
	for i, st := range steps {
		if err := st.validate(fmt.Sprintf("%s[%d]", where, i)); err != nil {
			return err
		}
	}
	return nil
}

func (st Step) validate(where string) error {
	var actions []string
	if len(st.Update) > 0 {
		actions = append(actions, "update")
		if err := jsonKind(st.Update, '{'); err != nil {
			return fmt.Errorf("agentsim: %s.update: %w", where, err)
		}
	}
	if len(st.Elicit) > 0 {
		actions = append(actions, "elicit")
		if err := jsonKind(st.Elicit, '{'); err != nil {
			return fmt.Errorf("agentsim: %s.elicit: %w", where, err)
		}
	}
	if st.Permission != nil {
		actions = append(actions, "permission")
		p := st.Permission
		if len(p.ToolCall) == 0 && len(p.Subject) == 0 {
			return fmt.Errorf("agentsim: %s.permission: needs a toolCall (v1) or a subject (v2)", where)
		}
		if len(p.ToolCall) > 0 {
			if err := jsonKind(p.ToolCall, '{'); err != nil {
				return fmt.Errorf("agentsim: %s.permission.toolCall: %w", where, err)
			}
		}
		if len(p.Subject) > 0 {
			if err := jsonKind(p.Subject, '{'); err != nil {
				return fmt.Errorf("agentsim: %s.permission.subject: %w", where, err)
			}
		}
		if len(st.Permission.Options) > 0 {
			if err := jsonKind(st.Permission.Options, '['); err != nil {
				return fmt.Errorf("agentsim: %s.permission.options: %w", where, err)
			}
			if _, err := parseOptions(st.Permission.Options); err != nil {
				return fmt.Errorf("agentsim: %s.permission.options: %w", where, err)
			}
		}
		if err := validateSteps(where+".permission.allowed", st.Permission.Allowed); err != nil {
			return err
		}
		if err := validateSteps(where+".permission.rejected", st.Permission.Rejected); err != nil {
			return err
		}
	}
	if st.Sleep < 0 {
		return fmt.Errorf("agentsim: %s.sleep: negative duration %v", where, st.Sleep)
	}
	if st.Sleep > 0 {
		actions = append(actions, "sleep")
	}
	if st.Raw != "" {
		actions = append(actions, "raw")
		if strings.ContainsAny(st.Raw, "\r\n") {
			return fmt.Errorf("agentsim: %s.raw: must be one line", where)
		}
	}
	if st.Exit != nil {
		actions = append(actions, "exit")
	}
	if st.Hang {
		actions = append(actions, "hang")
	}
	if st.Stderr != "" {
		actions = append(actions, "stderr")
	}
	if st.Env != "" {
		actions = append(actions, "env")
	}
	if st.ReadFile != "" {
		actions = append(actions, "readFile")
	}
	if st.WriteFile != nil {
		actions = append(actions, "writeFile")
	}
	if st.Terminal != "" {
		actions = append(actions, "terminal")
	}
	if st.Flood != nil {
		actions = append(actions, "flood")
		if st.Flood.Count < 0 {
			return fmt.Errorf("agentsim: %s.flood.count: negative count %d", where, st.Flood.Count)
		}
		if err := jsonKind(st.Flood.Update, '{'); err != nil {
			return fmt.Errorf("agentsim: %s.flood.update: %w", where, err)
		}
	}
	if st.LongLine < 0 {
		return fmt.Errorf("agentsim: %s.longLine: negative length %d", where, st.LongLine)
	}
	if st.LongLine > 0 {
		actions = append(actions, "longLine")
	}
	if st.Shell != "" {
		actions = append(actions, "shell")
	}
	if len(st.RawBytes) > 0 {
		actions = append(actions, "rawBytes")
		if bytes.ContainsAny(st.RawBytes, "\r\n") {
			return fmt.Errorf("agentsim: %s.rawBytes: must be one line", where)
		}
	}
	if len(actions) > 1 {
		return fmt.Errorf("agentsim: %s does more than one thing: %s", where, strings.Join(actions, ", "))
	}
	return nil
}

// jsonKind checks that raw is valid JSON whose first token opens with want.
func jsonKind(raw json.RawMessage, want byte) error {
	if !json.Valid(raw) {
		return errors.New("not valid JSON")
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != want {
		if want == '{' {
			return errors.New("not a JSON object")
		}
		return errors.New("not a JSON array")
	}
	return nil
}

// option is the part of a PermissionOption the agent needs.
type option struct {
	OptionID string `json:"optionId"`
	Kind     string `json:"kind"`
}

func parseOptions(raw json.RawMessage) ([]option, error) {
	var opts []option
	if err := json.Unmarshal(raw, &opts); err != nil {
		return nil, err
	}
	return opts, nil
}
