package egress

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent's side of the proxy, inside its sandbox.
const (
	// ListenCommand is the first argument that makes the gateway's binary
	// the helper that opens the proxy's socket in the sandbox (see
	// ListenIfCommanded).
	ListenCommand = "__acp-gateway-egress-listen"
	// ProxyAddr is where agents find the proxy, in their own namespace.
	ProxyAddr = "127.0.0.1:3128"
	// HandoffSocket is the name of the socket in the handoff directory.
	HandoffSocket = "handoff.sock"
)

// Env is what an agent's environment gets so that its HTTP clients use
// the proxy (NO_PROXY is left out: even loopback goes through it).
func Env() []string {
	u := "http://" + ProxyAddr
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		// Node.js 24's fetch honours the variables only so.
		"NODE_USE_ENV_PROXY=1"}
}

// Handoff receives, from the helper in an agent's sandbox, the listening
// socket it made in the sandbox's network namespace: a process outside the
// namespace cannot make one there without privileges, and one made
// outside would listen on the host's network.
type Handoff struct {
	dir string
	ln  *net.UnixListener
}

// NewHandoff makes a directory of its own (0700, under the system's
// temporary directory) with a socket to receive on.
func NewHandoff() (*Handoff, error) {
	dir, err := os.MkdirTemp("", "acp-egress-")
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, HandoffSocket), Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Handoff{dir: dir, ln: ln}, nil
}

// Dir is the directory to show the sandbox.
func (h *Handoff) Dir() string { return h.dir }

// Receive waits, at most wait, for the helper, and returns the listener it
// sent.
func (h *Handoff) Receive(wait time.Duration) (net.Listener, error) {
	_ = h.ln.SetDeadline(time.Now().Add(wait))
	c, err := h.ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("egress: the helper sent no socket")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, errors.New("egress: the helper sent no socket")
	}
	f := os.NewFile(uintptr(fds[0]), "egress-listener")
	defer f.Close()
	// Only a listening TCP socket will do.
	if v, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return nil, errors.New("egress: the helper sent a socket that is not listening")
	}
	return net.FileListener(f)
}

// Close stops waiting and removes the directory.
func (h *Handoff) Close() error {
	err := h.ln.Close()
	os.RemoveAll(h.dir)
	return err
}

// ListenIfCommanded runs the helper and never returns when this process
// was started as it: os.Args[1] is ListenCommand, then the socket to send
// the listener to, "--", and the agent's command line, which it executes
// once the listener is sent. Otherwise it returns at once. The gateway's
// main, and the tests that run sandboxes, call it first.
func ListenIfCommanded() {
	if len(os.Args) < 2 || os.Args[1] != ListenCommand {
		return
	}
	if err := listenAndExec(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "acp-gateway egress helper:", err)
		os.Exit(126)
	}
}

func listenAndExec(args []string) error {
	sep := slices.Index(args, "--")
	if sep != 1 || len(args) < 3 {
		return fmt.Errorf("usage: %s SOCKET -- COMMAND [ARG]", ListenCommand)
	}
	l, err := net.Listen("tcp", ProxyAddr)
	if err != nil {
		return err
	}
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: args[0], Net: "unix"})
	if err != nil {
		return err
	}
	if _, _, err := c.WriteMsgUnix([]byte{1}, unix.UnixRights(int(f.Fd())), nil); err != nil {
		return err
	}
	// The gateway holds the socket now; this process's copies go.
	c.Close()
	f.Close()
	l.Close()
	command := args[2:]
	return syscall.Exec(command[0], command, os.Environ())
}

// ServeAgent serves the proxy of one agent: it waits, at most wait, for
// the agent's helper to hand over the listener, then serves p on it. The
// returned Closer stops waiting or serving, and removes the handoff.
func (p *Policy) ServeAgent(h *Handoff, wait time.Duration, log *slog.Logger) io.Closer {
	a := &agentProxy{h: h, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		l, err := h.Receive(wait)
		h.Close()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Warn("agent egress: the sandbox's proxy socket did not come; the agent has no network", "error", err.Error())
			}
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			l.Close()
			return
		}
		a.proxy = p.Serve(l, log)
	}()
	return a
}

type agentProxy struct {
	h      *Handoff
	done   chan struct{}
	mu     sync.Mutex
	closed bool
	proxy  *Proxy
}

func (a *agentProxy) Close() error {
	a.mu.Lock()
	a.closed = true
	proxy := a.proxy
	a.mu.Unlock()
	a.h.Close()
	<-a.done
	if proxy != nil {
		proxy.Close()
	}
	return nil
}
