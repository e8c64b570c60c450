package acpnet

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
)

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for v := range strings.SplitSeq(r.Header.Get("Upgrade"), ",") {
		if strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return false
}

// serveWebSocket upgrades r and serves ACP on it, one JSON-RPC message a
// text frame, until either side ends it.
func (h *Handler) serveWebSocket(w http.ResponseWriter, r *http.Request, opts bridge.Options) {
	user := auth.User(r.Context())
	h.mu.Lock()
	err := h.reserveLocked(user)
	h.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer h.release(user)
	w.Header().Set(HeaderConnectionID, newConnectionID())
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Selected when offered: a browser that offers a subprotocol (the
		// token's) fails the handshake unless the server selects one.
		Subprotocols: []string{Subprotocol},
		// The server's Host and Origin policy has checked the Origin
		// already; this is the library's own check, to the same effect.
		OriginPatterns: h.opts.OriginPatterns,
	})
	if err != nil {
		h.opts.Log.Debug("an /acp WebSocket upgrade failed", "error", err)
		return // Accept answered
	}
	defer func() { _ = c.CloseNow() }() // after Close, or on a path that already failed
	c.SetReadLimit(int64(h.opts.ReadMaxBytes))
	closed := h.opts.Opened("websocket")
	defer closed()
	ctx, cancel := context.WithCancel(withPeer(r.Context(), r.RemoteAddr))
	defer cancel()
	if every := h.opts.PingInterval; every > 0 {
		h.wg.Go(func() { ping(ctx, c, every, h.opts.WriteTimeout) })
	}
	h.serve(ctx, &wsMessages{ctx: ctx, c: c, writeTimeout: h.opts.WriteTimeout}, opts)
}

// ping pings c every interval until ctx ends, and closes c when a pong
// does not come back within timeout.
func ping(ctx context.Context, c *websocket.Conn, every, timeout time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			_ = c.CloseNow()
			return
		}
	}
}

// wsMessages is bridge.Messages over a WebSocket: one message a text
// frame; binary frames are ignored, as the RFD asks.
type wsMessages struct {
	ctx          context.Context
	c            *websocket.Conn
	writeTimeout time.Duration
}

func (m *wsMessages) Read() ([]byte, error) {
	for {
		typ, b, err := m.c.Read(m.ctx)
		if err != nil {
			return nil, err
		}
		if typ == websocket.MessageText {
			return b, nil
		}
	}
}

func (m *wsMessages) Write(b []byte) error {
	ctx, cancel := context.WithTimeout(m.ctx, m.writeTimeout)
	defer cancel()
	return m.c.Write(ctx, websocket.MessageText, b)
}

func (m *wsMessages) Close() error {
	err := m.c.Close(websocket.StatusNormalClosure, "")
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
