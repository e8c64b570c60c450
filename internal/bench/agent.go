package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// ServeAgent runs the synthetic ACP agent on in and out until in ends. It
// answers initialize (with ACP protocol version protocol, 1 or 2),
// session/new and session/prompt, and accepts session/cancel. A prompt
// whose first text block is a JSON [Workload] plays it: Workload.Updates
// session/update notifications, each stamped in
// _meta.bench = {"n": number, "t": "send time in Unix nanoseconds"}, written
// and flushed one line at a time. Any other prompt plays a 10-update turn.
// A v1 turn ends with the prompt's answer, a v2 turn with an idle
// state_update first.
func ServeAgent(ctx context.Context, in io.Reader, out io.Writer, protocol int) error {
	if protocol != 1 && protocol != 2 {
		return fmt.Errorf("bench agent: protocol version %d (want 1 or 2)", protocol)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &simAgent{ctx: ctx, out: bufio.NewWriterSize(out, 64<<10), protocol: protocol, turns: map[string]context.CancelFunc{}}
	br := bufio.NewReaderSize(in, 64<<10)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			a.handle(line)
		}
		if err != nil {
			break
		}
	}
	cancel()
	a.wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type simAgent struct {
	ctx      context.Context
	protocol int
	wg       sync.WaitGroup

	outMu sync.Mutex
	out   *bufio.Writer
	err   error // the first write error

	mu       sync.Mutex
	sessions int
	turns    map[string]context.CancelFunc // by session id
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// write writes one line and flushes it.
func (a *simAgent) write(line []byte) error {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	if a.err != nil {
		return a.err
	}
	if _, err := a.out.Write(line); err != nil {
		a.err = err
		return err
	}
	a.err = a.out.Flush()
	return a.err
}

func (a *simAgent) reply(id json.RawMessage, result string) {
	_ = a.write([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + "}\n"))
}

func (a *simAgent) replyError(id json.RawMessage, code int, msg string) {
	m, _ := json.Marshal(msg)
	_ = a.write([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":` + strconv.Itoa(code) + `,"message":` + string(m) + "}}\n"))
}

func (a *simAgent) handle(line []byte) {
	var m rpcMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return // not JSON: ignored
	}
	if m.Method == "" {
		return // an answer to a request of ours: there are none
	}
	notification := len(m.ID) == 0 || string(m.ID) == "null"
	switch m.Method {
	case "initialize":
		a.reply(m.ID, `{"protocolVersion":`+strconv.Itoa(a.protocol)+
			`,"agentCapabilities":{"loadSession":false,"promptCapabilities":{}},"authMethods":[],`+
			`"agentInfo":{"name":"acp-gateway-bench","version":"1"}}`)
	case "session/new":
		a.mu.Lock()
		a.sessions++
		id := "bench-session-" + strconv.Itoa(a.sessions)
		a.mu.Unlock()
		a.reply(m.ID, `{"sessionId":"`+id+`"}`)
	case "session/prompt":
		a.prompt(m)
	case "session/cancel":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.mu.Lock()
		if c := a.turns[p.SessionID]; c != nil {
			c()
		}
		a.mu.Unlock()
		if !notification {
			a.reply(m.ID, "null")
		}
	default:
		if !notification {
			a.replyError(m.ID, -32601, "Method not found: "+m.Method)
		}
	}
}

func (a *simAgent) prompt(m rpcMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID == "" {
		a.replyError(m.ID, -32602, "session/prompt needs a sessionId and a prompt")
		return
	}
	w := Workload{Updates: 10}
	for _, b := range p.Prompt {
		if b.Text != "" {
			if err := json.Unmarshal([]byte(b.Text), &w); err != nil {
				w = Workload{Updates: 10}
			}
			break
		}
	}
	a.mu.Lock()
	if a.turns[p.SessionID] != nil {
		a.mu.Unlock()
		a.replyError(m.ID, -32000, "a turn is running in this session")
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.turns[p.SessionID] = cancel
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		stop := a.play(ctx, p.SessionID, w)
		a.mu.Lock()
		delete(a.turns, p.SessionID)
		a.mu.Unlock()
		cancel()
		if a.protocol >= 2 {
			_ = a.write([]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":` + strconv.Quote(p.SessionID) +
				`,"update":{"sessionUpdate":"state_update","state":"idle","stopReason":"` + stop + `"}}}` + "\n"))
			a.reply(m.ID, "{}")
			return
		}
		a.reply(m.ID, `{"stopReason":"`+stop+`"}`)
	}()
}

// play sends the turn's updates and returns its stop reason.
func (a *simAgent) play(ctx context.Context, sessionID string, w Workload) string {
	lm := newLineMaker(a.protocol, w.Payload, sessionID)
	var interval time.Duration
	if w.Rate > 0 {
		interval = time.Duration(float64(time.Second) / w.Rate)
	}
	start := time.Now()
	buf := make([]byte, 0, 16<<10)
	for n := 1; n <= w.Updates; n++ {
		if ctx.Err() != nil {
			return "cancelled"
		}
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(n-1) * interval)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return "cancelled"
				}
			}
		}
		buf = lm.appendLine(buf[:0], n, time.Now().UnixNano())
		if err := a.write(buf); err != nil {
			return "cancelled"
		}
	}
	return "end_turn"
}
