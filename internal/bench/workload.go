package bench

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Workload is what the synthetic agent plays for one session/prompt. It
// travels as the JSON text of the prompt's first text block, so every path
// (pipe, websocketd, gateway) drives the same agent the same way.
type Workload struct {
	// Updates is how many session/update notifications the turn sends.
	Updates int `json:"updates"`
	// Rate paces the updates (per second); zero sends them as fast as the
	// output takes them.
	Rate float64 `json:"rate,omitempty"`
	// Payload scales the text of the updates: a tool-call content chunk
	// carries this many bytes of text, a message chunk a quarter, a diff
	// four times as much on each side.
	Payload int `json:"payload"`
}

// DefaultPayload is Workload.Payload when it is zero.
const DefaultPayload = 256

// groupSize is the number of updates of one tool call's life (see kinds).
const groupSize = 10

// sample text, code-like, with characters JSON must escape.
const sampleText = "\tif err := run(ctx, cfg); err != nil {\n\t\treturn fmt.Errorf(\"step %d: %w\", i, err)\n\t}\n" +
	"// Package config loads the settings.\nfunc Load(path string) (*Config, error) {\n\tb, err := os.ReadFile(path)\n"

// text returns n bytes of sample text, JSON-quoted.
func text(n int) string {
	if n < 1 {
		n = 1
	}
	s := strings.Repeat(sampleText, n/len(sampleText)+1)[:n]
	b, _ := json.Marshal(s)
	return string(b)
}

// idMark stands for the tool call's id in an update template.
const idMark = "@ID@"

// templates returns the update objects of one tool call's life, without
// their closing brace (where _meta goes), for ACP protocol version v.
//
// v1: tool_call (create), tool_call_update (in_progress), 2
// agent_message_chunk, 4 tool_call_update carrying the output as content,
// agent_thought_chunk, tool_call_update (completed, with a diff).
//
// v2: the same, but created with the tool_call_update upsert and the
// output streamed as tool_call_content_chunk.
func templates(v, payload int) [groupSize]string {
	if payload <= 0 {
		payload = DefaultPayload
	}
	path := `"/home/dev/project/internal/config/` + idMark + `.go"`
	create := `"toolCallId":"` + idMark + `","title":"Edit internal/config/` + idMark + `.go","kind":"edit","status":"pending",` +
		`"locations":[{"path":` + path + `,"line":42}],` +
		`"rawInput":{"file_path":` + path + `,"old_string":` + text(payload/2) + `,"new_string":` + text(payload/2) + `}`
	chunk := func(tag string, n int) string {
		return `{"sessionUpdate":"` + tag + `","content":{"type":"text","text":` + text(n) + `}`
	}
	output := `{"type":"content","content":{"type":"text","text":` + text(payload) + `}}`
	done := `{"sessionUpdate":"tool_call_update","toolCallId":"` + idMark + `","status":"completed",` +
		`"content":[{"type":"diff","path":` + path + `,"oldText":` + text(4*payload) + `,"newText":` + text(4*payload) + `}],` +
		`"rawOutput":{"ok":true,"linesChanged":12}`
	progress := `{"sessionUpdate":"tool_call_update","toolCallId":"` + idMark + `","status":"in_progress"`
	var t [groupSize]string
	if v == 1 {
		t[0] = `{"sessionUpdate":"tool_call",` + create
		for i := 4; i < 8; i++ {
			t[i] = `{"sessionUpdate":"tool_call_update","toolCallId":"` + idMark + `","content":[` + output + `]`
		}
	} else {
		t[0] = `{"sessionUpdate":"tool_call_update",` + create
		for i := 4; i < 8; i++ {
			t[i] = `{"sessionUpdate":"tool_call_content_chunk","toolCallId":"` + idMark + `","content":` + output
		}
	}
	t[1] = progress
	t[2] = chunk("agent_message_chunk", payload/4)
	t[3] = chunk("agent_message_chunk", payload/4)
	t[8] = chunk("agent_thought_chunk", payload/4)
	t[9] = done
	return t
}

// lineMaker builds the session/update lines of a turn.
type lineMaker struct {
	// parts[k] is template k split at idMark.
	parts [groupSize][]string
	head  string // the line up to the update object
}

func newLineMaker(v, payload int, sessionID string) *lineMaker {
	lm := &lineMaker{head: `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":` + strconv.Quote(sessionID) + `,"update":`}
	for k, t := range templates(v, payload) {
		lm.parts[k] = strings.Split(t, idMark)
	}
	return lm
}

// appendLine appends update number n (counting from 1), stamped with the
// send time t (Unix nanoseconds), and a newline.
func (lm *lineMaker) appendLine(b []byte, n int, t int64) []byte {
	i := n - 1
	id := "call_" + strconv.Itoa(i/groupSize)
	b = append(b, lm.head...)
	for j, p := range lm.parts[i%groupSize] {
		if j > 0 {
			b = append(b, id...)
		}
		b = append(b, p...)
	}
	b = append(b, `,"_meta":{"bench":{"n":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"t":"`...)
	b = strconv.AppendInt(b, t, 10)
	b = append(b, `"}}}}}`...)
	return append(b, '\n')
}
