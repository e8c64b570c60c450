package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// turnSpec is one turn to measure: the agent's protocol and the workload.
type turnSpec struct {
	Protocol int      `json:"protocol"`
	Work     Workload `json:"work"`
}

// pipeResult is what the pipe reader child reports.
type pipeResult struct {
	Turns   []turnResult `json:"turns"`
	PeakRSS int64        `json:"peakRss"`
}

// inbound is what the floor readers decode of each agent line: enough to
// find the answers and the bench stamp, with the whole line parsed.
type inbound struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	Params struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			SessionUpdate string `json:"sessionUpdate"`
			State         string `json:"state"`
			Meta          struct {
				Bench struct {
					N int64  `json:"n"`
					T string `json:"t"`
				} `json:"bench"`
			} `json:"_meta"`
		} `json:"update"`
	} `json:"params"`
}

// decodeLine decodes one agent line into m (reset first).
func decodeLine(line []byte, m *inbound) error {
	*m = inbound{}
	return json.Unmarshal(line, m)
}

// handshakeLines are the lines a client sends first: initialize and
// session/new (in cwd, an absolute path).
func handshakeLines(protocol int, cwd string) [2][]byte {
	cwdJSON, _ := json.Marshal(cwd)
	return [2][]byte{
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":` + strconv.Itoa(protocol) + `,"clientCapabilities":{}}}`),
		[]byte(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + string(cwdJSON) + `,"mcpServers":[]}}`),
	}
}

// promptLine is the session/prompt (request id 3) that makes the agent
// of session id play w.
func promptLine(sessionID string, w Workload) []byte {
	text, _ := json.Marshal(w)
	prompt, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
		"params": map[string]any{"sessionId": sessionID, "prompt": []any{map[string]any{"type": "text", "text": string(text)}}},
	})
	return prompt
}

// lineClient runs the client side of one turn over a line transport:
// send writes one line (without its newline), recv returns the next line.
// The session is the one session/new (in cwd) answers with. It returns
// when the turn ends (see below), or with closeSession when
// the session/close it then sends (id 4) is.
func lineClient(protocol int, w Workload, cwd string, closeSession bool, send func([]byte) error, recv func() ([]byte, error), cpu func() time.Duration) (turnResult, error) {
	hs := handshakeLines(protocol, cwd)
	var k tracker
	k.r.Samples = make([]int64, 0, w.Updates)
	var m inbound
	// call sends a request line and returns its answer's result (the lines
	// before it are not the turn's: nothing is measured yet).
	call := func(id int, what string, line []byte) (json.RawMessage, error) {
		if err := send(line); err != nil {
			return nil, err
		}
		for {
			line, err := recv()
			if err != nil {
				return nil, fmt.Errorf("waiting for the answer to %s: %w", what, err)
			}
			if decodeLine(line, &m) == nil && string(m.ID) == strconv.Itoa(id) {
				if len(m.Error) > 0 {
					return nil, fmt.Errorf("%s refused: %s", what, m.Error)
				}
				return m.Result, nil
			}
		}
	}
	if _, err := call(1, "initialize", hs[0]); err != nil {
		return k.r, err
	}
	res, err := call(2, "session/new", hs[1])
	if err != nil {
		return k.r, err
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &created); err != nil || created.SessionID == "" {
		return k.r, fmt.Errorf("session/new answered no session id: %s", res)
	}
	sessionID := created.SessionID
	var cpu0 time.Duration
	if cpu != nil {
		cpu0 = cpu()
	}
	if err := send(promptLine(sessionID, w)); err != nil {
		return k.r, err
	}
	// The turn ends with the prompt's answer, and in v2 with the idle
	// state_update too, which the gateway sends after answering (it
	// answers once the turn started), the synthetic agent before.
	var answered, idle bool
	for {
		line, err := recv()
		if err != nil {
			return k.r, fmt.Errorf("reading the turn: %w", err)
		}
		if err := decodeLine(line, &m); err != nil {
			return k.r, fmt.Errorf("a line that does not decode: %w", err)
		}
		recvT := time.Now().UnixNano()
		if b := m.Params.Update.Meta.Bench; b.N > 0 {
			t, err := strconv.ParseInt(b.T, 10, 64)
			if err == nil {
				k.see(b.N, t, recvT)
			}
		}
		if m.Params.Update.SessionUpdate == "state_update" && m.Params.Update.State == "idle" {
			idle = true
		}
		if string(m.ID) == "3" {
			if len(m.Error) > 0 {
				return k.r, fmt.Errorf("the prompt failed: %s", m.Error)
			}
			answered = true
		}
		if answered && (idle || protocol < 2) {
			break
		}
	}
	if cpu != nil {
		k.r.CPU = cpu() - cpu0
	}
	if k.r.Updates != w.Updates {
		return k.r, fmt.Errorf("received %d of %d updates", k.r.Updates, w.Updates)
	}
	if closeSession {
		closing := []byte(`{"jsonrpc":"2.0","id":4,"method":"session/close","params":{"sessionId":` + strconv.Quote(sessionID) + `}}`)
		if _, err := call(4, "session/close", closing); err != nil {
			return k.r, err
		}
	}
	return k.r, nil
}

// servePipe is the child mode "pipe": for each turn of --turns it starts
// the synthetic agent on pipes, drives it and decodes every line it
// writes, and measures its own CPU time during the turn. It prints a
// pipeResult as JSON.
func servePipe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench pipe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runID := fs.String("run", "", "bench run id, passed to the agents")
	turnsJSON := fs.String("turns", "[]", "the turns, as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var turns []turnSpec
	if err := json.Unmarshal([]byte(*turnsJSON), &turns); err != nil {
		fmt.Fprintln(stderr, "bench pipe: --turns:", err)
		return 2
	}
	self, err := selfCommand()
	if err != nil {
		fmt.Fprintln(stderr, "bench pipe:", err)
		return 1
	}
	var res pipeResult
	for _, t := range turns {
		r, err := pipeTurn(ctx, self, *runID, t)
		if err != nil {
			fmt.Fprintln(stderr, "bench pipe:", err)
			return 1
		}
		res.Turns = append(res.Turns, r)
	}
	res.PeakRSS, _ = procStatus(os.Getpid(), "VmHWM")
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

func pipeTurn(ctx context.Context, self []string, runID string, t turnSpec) (turnResult, error) {
	argv := agentCommand(self, runID, t.Protocol)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = agentEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return turnResult{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return turnResult{}, err
	}
	var errBuf lockedBuffer
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		return turnResult{}, err
	}
	br := bufio.NewReaderSize(stdout, 64<<10)
	send := func(line []byte) error {
		_, err := stdin.Write(append(line, '\n'))
		return err
	}
	recv := func() ([]byte, error) {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && len(bytes.TrimSpace(line)) == 0 {
			return nil, err
		}
		return line, nil
	}
	r, err := lineClient(t.Protocol, t.Work, "/", false, send, recv, selfCPU)
	_ = stdin.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case <-waitErr:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waitErr
	}
	if err != nil {
		return r, fmt.Errorf("%w (agent stderr: %s)", err, strings.TrimSpace(errBuf.String()))
	}
	return r, nil
}

// runPipe runs the pipe path: a reader child per run of turns, measured by
// the child itself.
func runPipe(ctx context.Context, self []string, runID string, turns []turnSpec) (pipeResult, error) {
	js, _ := json.Marshal(turns)
	args := append(append([]string{}, self[1:]...), "pipe", "--run", runID, "--turns", string(js))
	cmd := exec.CommandContext(ctx, self[0], args...)
	var out bytes.Buffer
	var errBuf lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errBuf
	var res pipeResult
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("pipe reader: %v: %s", err, strings.TrimSpace(errBuf.String()))
	}
	err := json.Unmarshal(out.Bytes(), &res)
	return res, err
}
