package acpnet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// Path is the endpoint's path; Path+"/AGENT" runs agent AGENT.
const Path = "/acp"

// Defaults for Options fields left zero.
const (
	// DefaultReadMaxBytes bounds one message from a client.
	DefaultReadMaxBytes = 4 << 20
	// DefaultWriteTimeout bounds how long a client may take to take one
	// message.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultPingInterval is how often an idle WebSocket is pinged.
	DefaultPingInterval = 30 * time.Second
)

// TokenProtocolPrefix starts the WebSocket subprotocol that carries a
// bearer token for clients that cannot set headers (browsers): the token,
// base64url-encoded without padding, follows it. The gateway never selects
// it, so the token is not echoed back; a browser fails a handshake whose
// answer selects none of the subprotocols it offered, so it offers
// [Subprotocol] beside it, which the gateway selects.
const TokenProtocolPrefix = "acp-gateway.bearer."

// Subprotocol is the WebSocket subprotocol the gateway selects when a
// client offers it.
const Subprotocol = "acp"

// Options configure a [Handler].
type Options struct {
	// Service is the gateway's SessionService handler, mounted at
	// acpv2connect.SessionServiceName's path, behind the same
	// authentication and interceptors as for network clients. Required.
	Service http.Handler
	// Agents are the names of the gateway's agents: /acp/AGENT runs
	// AGENT, /acp runs the first (a client may name another in
	// session/new's _meta). Required.
	Agents []string
	// ReadMaxBytes bounds one message from a client: a WebSocket that
	// sends a larger one is closed (1009, message too big). Zero is
	// DefaultReadMaxBytes.
	ReadMaxBytes int
	// WriteTimeout bounds how long a client may take to take one message
	// before its connection is closed. Zero is DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PingInterval is how often a WebSocket is pinged, so that proxies do
	// not cut it and a dead peer is noticed. Zero is DefaultPingInterval;
	// less than zero, never.
	PingInterval time.Duration
	// OriginPatterns are the host patterns of the origins, besides the
	// gateway's own, that browsers may open a WebSocket from (the CORS
	// origins' hosts).
	OriginPatterns []string
	// HTTPIdleTimeout ends a Streamable HTTP connection that has had no
	// request and no SSE stream open for this long. Zero is
	// DefaultHTTPIdleTimeout.
	HTTPIdleTimeout time.Duration
	// MaxHTTPConnections bounds the Streamable HTTP connections open at
	// once (the WebSockets are bounded as the server's connections are),
	// and MaxConnectionsPerUser each user's connections of both kinds: one
	// more initialize or upgrade is answered 429. Zero is the Default.
	MaxHTTPConnections, MaxConnectionsPerUser int
	// Opened, when set, counts a connection of transport ("websocket",
	// "http") open; the function it returns counts it closed.
	Opened func(transport string) (closed func())
	// Version is the gateway's version in the initialize answer.
	Version string
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
}

// Handler serves ACP at [Path].
type Handler struct {
	opts   Options
	client acpv2connect.SessionServiceClient
	// wg counts the connections and the in-process calls being served.
	wg sync.WaitGroup
	// base ends every Streamable HTTP connection (Close).
	base  context.Context
	close context.CancelFunc

	mu sync.Mutex
	// conns are the Streamable HTTP connections, by Acp-Connection-Id.
	conns map[string]*httpConn
	// perUser counts each user's connections, of both kinds.
	perUser map[string]int
}

// New returns the handler of the /acp endpoint.
func New(opts Options) *Handler {
	if opts.ReadMaxBytes <= 0 {
		opts.ReadMaxBytes = DefaultReadMaxBytes
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.PingInterval == 0 {
		opts.PingInterval = DefaultPingInterval
	}
	if opts.HTTPIdleTimeout <= 0 {
		opts.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	}
	if opts.MaxHTTPConnections <= 0 {
		opts.MaxHTTPConnections = DefaultMaxHTTPConnections
	}
	if opts.MaxConnectionsPerUser <= 0 {
		opts.MaxConnectionsPerUser = DefaultMaxConnectionsPerUser
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Opened == nil {
		opts.Opened = func(string) func() { return func() {} }
	}
	h := &Handler{opts: opts, conns: map[string]*httpConn{}, perUser: map[string]int{}}
	h.base, h.close = context.WithCancel(context.Background())
	h.client = acpv2connect.NewSessionServiceClient(
		&http.Client{Transport: inProcess{h: opts.Service, wg: &h.wg}},
		"http://in-process",
		// Nothing to gain from compressing in memory.
		connect.WithAcceptCompression("gzip", nil, nil),
		connect.WithReadMaxBytes(max(opts.ReadMaxBytes, 16<<20)),
	)
	return h
}

// Close ends every connection: the WebSockets with their requests'
// contexts, which the server's shutdown ends, the Streamable HTTP ones
// here. Then it waits for them to end.
func (h *Handler) Close() {
	h.close()
	h.wg.Wait()
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	agent, choose, ok := h.agent(r.URL.Path)
	if !ok {
		http.Error(w, "no such agent", http.StatusNotFound)
		return
	}
	opts := bridge.Options{
		Client:       h.client,
		Agent:        agent,
		ChooseAgent:  choose,
		KeepSessions: true, // sessions outlive connections
		Follow:       true, // every client of a session sees its turns
		Version:      h.opts.Version,
		Log:          h.opts.Log,
	}
	h.wg.Add(1)
	defer h.wg.Done()
	if isWebSocket(r) {
		h.serveWebSocket(w, r, opts)
		return
	}
	h.serveHTTP(w, r, opts)
}

// agent returns the agent that path names, or the default one (which a
// client may then choose otherwise) at Path itself.
func (h *Handler) agent(path string) (agent string, choose, ok bool) {
	if path == Path || path == Path+"/" {
		if len(h.opts.Agents) == 0 {
			return "", false, false
		}
		return h.opts.Agents[0], true, true
	}
	name, found := strings.CutPrefix(path, Path+"/")
	if !found || !slices.Contains(h.opts.Agents, name) {
		return "", false, false
	}
	return name, false, true
}

// errTooMany refuses a connection past MaxConnectionsPerUser.
var errTooMany = errors.New("too many ACP connections of this user; close those no longer used")

// reserveLocked counts a connection of user, within MaxConnectionsPerUser.
// h.mu must be held.
func (h *Handler) reserveLocked(user string) error {
	if h.perUser[user] >= h.opts.MaxConnectionsPerUser {
		return errTooMany
	}
	h.perUser[user]++
	return nil
}

// release counts a connection of user gone.
func (h *Handler) release(user string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perUser[user]--; h.perUser[user] <= 0 {
		delete(h.perUser, user)
	}
}

// newConnectionID returns a fresh Acp-Connection-Id.
func newConnectionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "c_" + hex.EncodeToString(b[:])
}

// serve runs the bridge on m, a connection's messages, until it ends, and
// logs why if it failed.
func (h *Handler) serve(ctx context.Context, m bridge.Messages, opts bridge.Options) {
	if err := bridge.ServeMessages(ctx, m, opts); err != nil {
		h.opts.Log.Error("serving an /acp connection", "error", err)
	}
}

// TokenFromProtocols moves a bearer token offered as a WebSocket
// subprotocol ([TokenProtocolPrefix]) into the request's Authorization
// header, when the request has none, and removes it from the offered
// subprotocols, so that authentication finds it where it looks and the
// token is never selected (echoed back). It wraps the authentication of
// the /acp endpoint.
func TokenFromProtocols(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered := r.Header.Values("Sec-WebSocket-Protocol")
		if len(offered) == 0 || !isWebSocket(r) {
			next.ServeHTTP(w, r)
			return
		}
		var keep []string
		var token string
		for _, v := range offered {
			for p := range strings.SplitSeq(v, ",") {
				p = strings.TrimSpace(p)
				if enc, ok := strings.CutPrefix(p, TokenProtocolPrefix); ok {
					if b, err := base64.RawURLEncoding.DecodeString(enc); err == nil && token == "" {
						token = string(b)
					}
					continue
				}
				if p != "" {
					keep = append(keep, p)
				}
			}
		}
		r = r.Clone(r.Context())
		r.Header.Del("Sec-WebSocket-Protocol")
		if len(keep) > 0 {
			r.Header.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
		}
		if token != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		next.ServeHTTP(w, r)
	})
}
