package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/acp-gateway/acp-gateway/gateway/acpnet"
)

// websocketdProc is a running websocketd serving the synthetic agent: each
// WebSocket connection gets an agent process, the agent's stdout lines are
// its messages, and its messages are the agent's stdin lines.
type websocketdProc struct {
	proc   *os.Process
	exited chan struct{}
	pid    int
	url    string
	stderr *lockedBuffer
}

// startWebsocketd starts websocketd (the binary at path) on a free
// loopback port. The agent takes its protocol version from the
// connection's query string (?protocol=N), which websocketd passes in
// QUERY_STRING.
func startWebsocketd(ctx context.Context, path string, self []string, runID string) (*websocketdProc, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		argv := append(append([]string{}, self...), "agent", "--run", runID)
		args := append([]string{"--address=127.0.0.1", "--port=" + strconv.Itoa(port), "--loglevel=error",
			"--passenv=" + strings.Join(agentEnvVars, ",")}, argv...)
		cmd := exec.Command(path, args...)
		w := &websocketdProc{url: "ws://127.0.0.1:" + strconv.Itoa(port) + "/", stderr: &lockedBuffer{}, exited: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = w.stderr, w.stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		w.proc, w.pid = cmd.Process, cmd.Process.Pid
		go func() {
			_ = cmd.Wait()
			close(w.exited)
		}()
		if lastErr = w.waitListening(ctx, port); lastErr == nil {
			return w, nil
		}
		w.stop()
	}
	return nil, lastErr
}

func (w *websocketdProc) waitListening(ctx context.Context, port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-w.exited:
			return fmt.Errorf("websocketd exited: %s", strings.TrimSpace(w.stderr.String()))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("websocketd did not listen within 10s")
}

// stop ends websocketd: SIGTERM, then SIGKILL after 5 s.
func (w *websocketdProc) stop() {
	_ = w.proc.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
		_ = w.proc.Kill()
		<-w.exited
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// wsTurn runs one turn through websocketd: a WebSocket connection (so an
// agent process), the handshake, the prompt, every message decoded.
func wsTurn(ctx context.Context, w *websocketdProc, t turnSpec) (turnResult, error) {
	cpu := func() time.Duration {
		d, _ := procCPU(w.pid)
		return d
	}
	return wsLineTurn(ctx, w.url+"?protocol="+strconv.Itoa(t.Protocol), nil, t, "/", false, cpu)
}

// acpTurn runs one turn through the gateway's own ACP endpoint: a
// WebSocket to /acp/AGENT (the synthetic agent speaking t.Protocol, the
// client asking for it too), initialize, session/new in cwd, the prompt,
// every message decoded as websocketd's are; then session/close, so the
// gateway ends the agent as the Connect paths' CloseSession does (an /acp
// session outlives its connection). cpu reads the gateway's CPU time.
func acpTurn(ctx context.Context, base string, t turnSpec, cwd string, cpu func() time.Duration) (turnResult, error) {
	url := "ws" + strings.TrimPrefix(base, "http") + "/acp/" + agentName(t.Protocol)
	return wsLineTurn(ctx, url, []string{acpnet.Subprotocol}, t, cwd, true, cpu)
}

// wsLineTurn runs one turn of lineClient over a WebSocket to url, one
// JSON-RPC message a text frame; closeSession as lineClient's.
func wsLineTurn(ctx context.Context, url string, subprotocols []string, t turnSpec, cwd string, closeSession bool, cpu func() time.Duration) (turnResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled, Subprotocols: subprotocols})
	if err != nil {
		return turnResult{}, fmt.Errorf("websocket dial %s: %w", url, err)
	}
	defer c.CloseNow() //nolint:errcheck
	c.SetReadLimit(64 << 20)
	send := func(line []byte) error { return c.Write(ctx, websocket.MessageText, line) }
	recv := func() ([]byte, error) {
		_, b, err := c.Read(ctx)
		return b, err
	}
	r, err := lineClient(t.Protocol, t.Work, cwd, closeSession, send, recv, cpu)
	if err != nil {
		return r, err
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	return r, nil
}
