package agentsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// cwdPlaceholder is replaced by the session's working directory.
const cwdPlaceholder = "{{cwd}}"

// outcome says how playing steps ended.
type outcome int

const (
	// next: every step was played; go on.
	next outcome = iota
	// cancelled: the turn was cancelled; answer "cancelled".
	cancelled
	// aborted: Serve is stopping, or the agent hung or exited; answer nothing.
	aborted
)

// run plays steps for one turn (or for the startup).
type run struct {
	a    *agent
	conn *jsonrpc2.Conn
	ctx  context.Context // ends on session/cancel or when Serve stops
	sess *session
	cwd  string // the session's cwd when the turn began
}

// play plays steps in order, checking for cancellation between steps.
func (r *run) play(steps []Step) (outcome, error) {
	for _, st := range steps {
		if o := r.check(); o != next {
			return o, nil
		}
		o, err := r.step(st)
		if err != nil || o != next {
			return o, err
		}
	}
	return r.check(), nil
}

// check is the step boundary: it reports whether to go on.
func (r *run) check() outcome {
	if r.a.ctx.Err() != nil {
		return aborted
	}
	if r.a.hung.Load() {
		<-r.a.ctx.Done()
		return aborted
	}
	if r.ctx.Err() != nil {
		return cancelled
	}
	return next
}

func (r *run) step(st Step) (outcome, error) {
	switch {
	case len(st.Update) > 0:
		return r.update(r.expandJSON(st.Update))
	case st.Permission != nil:
		return r.permission(st.Permission)
	case len(st.Elicit) > 0:
		return r.elicit(st.Elicit)
	case st.Sleep > 0:
		t := time.NewTimer(time.Duration(st.Sleep))
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.ctx.Done():
		}
		return next, nil
	case st.Raw != "":
		return r.writeLine([]byte(st.Raw), "raw line"), nil
	case st.Exit != nil:
		r.a.exit(*st.Exit)
		return aborted, nil
	case st.Hang:
		r.a.hung.Store(true)
		<-r.a.ctx.Done()
		return aborted, nil
	case st.Stderr != "":
		_, _ = r.a.stderr.Write([]byte(st.Stderr + "\n"))
		return next, nil
	case st.Env != "":
		text := "env " + st.Env + " unset"
		if v, ok := os.LookupEnv(st.Env); ok {
			text = "env " + st.Env + "=" + v
		}
		return r.play([]Step{{Update: textChunk("agent_message_chunk", text)}})
	case st.ReadFile != "":
		return r.readFile(r.expandPath(st.ReadFile))
	case st.Terminal != "":
		return r.terminal(st.Terminal)
	case st.WriteFile != nil:
		return r.writeFile(r.expandPath(st.WriteFile.Path), st.WriteFile.Content)
	case st.Flood != nil:
		return r.flood(st.Flood)
	case st.LongLine > 0:
		return r.longLine(st.LongLine)
	case len(st.RawBytes) > 0:
		return r.writeLine(st.RawBytes, "raw bytes"), nil
	case st.Shell != "":
		return r.shell(st.Shell)
	}
	return next, nil
}

// maxShellOutput bounds what a Shell step reports of its command's output.
const maxShellOutput = 64 << 10

// shell runs command with /bin/sh -c and reports its status and output.
func (r *run) shell(command string) (outcome, error) {
	cmd := exec.CommandContext(r.ctx, "/bin/sh", "-c", command)
	out, err := cmd.CombinedOutput()
	if len(out) > maxShellOutput {
		out = out[:maxShellOutput]
	}
	status := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		status = ee.ExitCode()
	case err != nil:
		return r.say(fmt.Sprintf("shell: %v", err))
	}
	return r.say(fmt.Sprintf("shell %d: %s", status, out))
}

// writeLine writes line and a newline to the output as they are, bypassing
// the JSON-RPC connection; what names the line in the log.
func (r *run) writeLine(line []byte, what string) outcome {
	if _, err := r.a.out.Write(append(line[:len(line):len(line)], '\n')); err != nil {
		r.a.logger.Printf("writing %s: %v", what, err)
		return aborted
	}
	return next
}

// floodPlaceholder is replaced by the number of a flooded update.
const floodPlaceholder = "{{n}}"

// flood sends f.Update f.Count times, checking for cancellation in between.
func (r *run) flood(f *Flood) (outcome, error) {
	update := r.expandJSON(f.Update)
	numbered := bytes.Contains(update, []byte(floodPlaceholder))
	for i := 1; i <= f.Count; i++ {
		if o := r.check(); o != next {
			return o, nil
		}
		u := update
		if numbered {
			u = bytes.ReplaceAll(update, []byte(floodPlaceholder), []byte(strconv.Itoa(i)))
		}
		if o, err := r.update(u); err != nil || o != next {
			return o, err
		}
	}
	return next, nil
}

// longLine writes a session/update notification n bytes long.
func (r *run) longLine(n int) (outcome, error) {
	line := func(text string) []byte {
		b, _ := json.Marshal(struct {
			JSONRPC string       `json:"jsonrpc"`
			Method  string       `json:"method"`
			Params  updateParams `json:"params"`
		}{"2.0", "session/update", updateParams{SessionID: r.sess.id, Update: textChunk("agent_message_chunk", text)}})
		return b
	}
	b := line("")
	if pad := n - len(b); pad > 0 {
		b = line(strings.Repeat("x", pad))
	}
	return r.writeLine(b, "a long line"), nil
}

// update sends one session/update.
func (r *run) update(update json.RawMessage) (outcome, error) {
	err := r.conn.Notify(r.a.ctx, "session/update", updateParams{SessionID: r.sess.id, Update: update})
	if err != nil {
		if r.gone(err) {
			return aborted, nil
		}
		return next, fmt.Errorf("sending session/update: %w", err)
	}
	return next, nil
}

// say sends text as an agent_message_chunk.
func (r *run) say(text string) (outcome, error) {
	return r.update(textChunk("agent_message_chunk", text))
}

func (r *run) permission(p *Permission) (outcome, error) {
	options := p.Options
	if len(options) == 0 {
		options = json.RawMessage(DefaultPermissionOptions)
	}
	options = r.expandJSON(options)
	params := struct {
		SessionID   string          `json:"sessionId"`
		ToolCall    json.RawMessage `json:"toolCall,omitempty"`
		Title       string          `json:"title,omitempty"`
		Description string          `json:"description,omitempty"`
		Subject     json.RawMessage `json:"subject,omitempty"`
		Options     json.RawMessage `json:"options"`
	}{r.sess.id, r.expandJSON(p.ToolCall), p.Title, p.Description, r.expandJSON(p.Subject), options}
	var res struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	// The request uses Serve's context, not the turn's: a session/cancel
	// leaves it pending until the client answers it.
	if err := r.conn.Call(r.a.ctx, "session/request_permission", params, &res); err != nil {
		if r.gone(err) {
			return aborted, nil
		}
		return next, fmt.Errorf("session/request_permission: %w", err)
	}
	switch res.Outcome.Outcome {
	case "cancelled":
		return cancelled, nil
	case "selected":
	default:
		return next, fmt.Errorf("session/request_permission: unknown outcome %q", res.Outcome.Outcome)
	}
	opts, err := parseOptions(options)
	if err != nil {
		return next, fmt.Errorf("permission options: %w", err)
	}
	for _, o := range opts {
		if o.OptionID != res.Outcome.OptionID {
			continue
		}
		switch {
		case strings.HasPrefix(o.Kind, "allow"):
			return r.play(p.Allowed)
		case strings.HasPrefix(o.Kind, "reject"):
			return r.play(p.Rejected)
		}
		return next, fmt.Errorf("session/request_permission: option %q has kind %q, neither allow nor reject", o.OptionID, o.Kind)
	}
	return next, fmt.Errorf("session/request_permission: unknown option %q selected", res.Outcome.OptionID)
}

// elicit sends elicitation/create with params, its sessionId the
// prompt's session, and reports the answer.
func (r *run) elicit(params json.RawMessage) (outcome, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(r.expandJSON(params), &p); err != nil {
		return next, fmt.Errorf("elicit params: %w", err)
	}
	p["sessionId"], _ = json.Marshal(r.sess.id)
	var res struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	return r.callAndSay("elicitation/create", p, &res, "elicit: ", func() string {
		if len(res.Content) > 0 && string(res.Content) != "null" {
			return "elicit " + res.Action + " " + string(res.Content)
		}
		return "elicit " + res.Action
	})
}

// notifyIdle sends the ACP v2 idle state_update that ends a turn.
func (r *run) notifyIdle(stopReason string) {
	update, _ := json.Marshal(struct {
		SessionUpdate string `json:"sessionUpdate"`
		State         string `json:"state"`
		StopReason    string `json:"stopReason"`
	}{"state_update", "idle", stopReason})
	_, _ = r.update(update)
}

func (r *run) terminal(command string) (outcome, error) {
	var res struct {
		TerminalID string `json:"terminalId"`
	}
	return r.callAndSay("terminal/create", struct {
		SessionID string `json:"sessionId"`
		Command   string `json:"command"`
	}{r.sess.id, command}, &res, "terminal: ", func() string { return "terminal " + res.TerminalID })
}

func (r *run) readFile(path string) (outcome, error) {
	var res struct {
		Content string `json:"content"`
	}
	return r.callAndSay("fs/read_text_file", struct {
		SessionID string `json:"sessionId"`
		Path      string `json:"path"`
	}{r.sess.id, path}, &res, "read "+path+": ", func() string { return "read " + path + ": " + res.Content })
}

func (r *run) writeFile(path, content string) (outcome, error) {
	return r.callAndSay("fs/write_text_file", struct {
		SessionID string `json:"sessionId"`
		Path      string `json:"path"`
		Content   string `json:"content"`
	}{r.sess.id, path, content}, nil, "write "+path+": ", func() string { return "wrote " + path })
}

// callAndSay calls the client's method and reports how it went as an
// agent_message_chunk: what done returns when the call succeeded, else
// failed followed by the error's message.
func (r *run) callAndSay(method string, params, result any, failed string, done func() string) (outcome, error) {
	if err := r.conn.Call(r.a.ctx, method, params, result); err != nil {
		if r.gone(err) {
			return aborted, nil
		}
		return r.say(failed + errorText(err))
	}
	return r.say(done())
}

// gone reports whether err means the connection or Serve ended.
func (r *run) gone(err error) bool {
	return errors.Is(err, jsonrpc2.ErrClosed) || r.a.ctx.Err() != nil
}

// expandJSON replaces the placeholder in raw JSON by the JSON-escaped cwd.
func (r *run) expandJSON(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(cwdPlaceholder)) {
		return raw
	}
	return bytes.ReplaceAll(raw, []byte(cwdPlaceholder), jsonEscape(r.cwd))
}

// expandPath replaces the placeholder in a path by the cwd.
func (r *run) expandPath(p string) string {
	return strings.ReplaceAll(p, cwdPlaceholder, r.cwd)
}

// jsonEscape returns s escaped for the inside of a JSON string.
func jsonEscape(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return out[1 : len(out)-1]
}

// textChunk returns a content-chunk update of the given kind carrying text.
func textChunk(kind, text string) json.RawMessage {
	type textContent struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	b, _ := json.Marshal(struct {
		SessionUpdate string      `json:"sessionUpdate"`
		Content       textContent `json:"content"`
	}{kind, textContent{"text", text}})
	return b
}

// errorText is the message of a JSON-RPC error, or the error's text.
func errorText(err error) string {
	var e *jsonrpc2.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
