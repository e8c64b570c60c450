package acpnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Headers of the Streamable HTTP profile.
const (
	HeaderConnectionID = "Acp-Connection-Id"
	HeaderSessionID    = "Acp-Session-Id"
)

// Bounds of the Streamable HTTP profile.
const (
	// DefaultMaxHTTPConnections bounds the Streamable HTTP connections open
	// at once.
	DefaultMaxHTTPConnections = 1024
	// DefaultMaxConnectionsPerUser bounds each user's connections, of
	// both kinds.
	DefaultMaxConnectionsPerUser = 32
	// DefaultHTTPIdleTimeout ends a connection that has had no request
	// and no SSE stream open for this long.
	DefaultHTTPIdleTimeout = 2 * time.Minute
	// streamKeep is how many messages an SSE stream keeps for a client
	// that resumes it with Last-Event-ID, and how many may wait for a
	// client that has no stream open; past it the connection ends.
	streamKeep = 1024
	// streamKeepBytes bounds the bytes those messages take.
	streamKeepBytes = 16 << 20
	// initializeTimeout bounds the wait for the answer to initialize.
	initializeTimeout = 30 * time.Second
)

// errConnectionGone ends a connection's Messages.
var errConnectionGone = errors.New("acpnet: the connection ended")

// httpConn is one Streamable HTTP connection: the bridge reads the bodies
// of its POSTs and writes to its SSE streams, a connection-scoped one and
// one per session.
type httpConn struct {
	id   string
	user string
	h    *Handler
	// ctx ends with the connection; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	in     chan []byte

	mu sync.Mutex
	// streams by session id; "" is the connection-scoped stream.
	streams map[string]*sseStream
	// routes are the sessions of the requests POSTed with Acp-Session-Id,
	// by JSON-RPC id, whose answers go to that session's stream.
	routes map[string]string
	// initID is the id of the initialize request that opened the
	// connection, and initAnswer where its answer goes.
	initID     string
	initAnswer chan []byte
	// active counts the requests and SSE streams being served; idle is
	// when the last one ended.
	active int
	idle   *time.Timer
}

// sseStream is the messages of one SSE stream, numbered from 1 (the SSE
// event id); it keeps the last streamKeep for Last-Event-ID.
type sseStream struct {
	events []sseEvent
	bytes  int
	nextID uint64
	// sent is the last id written to a client.
	sent uint64
	// wake is signalled when a message comes.
	wake chan struct{}
	// reader is the GET now serving the stream; a new GET takes over.
	reader chan struct{}
}

type sseEvent struct {
	id   uint64
	data []byte
}

func newStream() *sseStream { return &sseStream{nextID: 1, wake: make(chan struct{}, 1)} }

// Read implements bridge.Messages.
func (c *httpConn) Read() ([]byte, error) {
	select {
	case msg := <-c.in:
		return msg, nil
	case <-c.ctx.Done():
		return nil, errConnectionGone
	}
}

// Close implements bridge.Messages.
func (c *httpConn) Close() error {
	c.cancel()
	return nil
}

// envelope is what routing needs of a JSON-RPC message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string `json:"sessionId"`
	} `json:"params"`
}

// Write implements bridge.Messages: the answer to initialize goes to its
// POST; an answer to a request POSTed with Acp-Session-Id, and a message
// whose params name a session, to that session's stream; the rest to the
// connection's.
func (c *httpConn) Write(msg []byte) error {
	var e envelope
	_ = json.Unmarshal(msg, &e)
	id := string(e.ID)
	c.mu.Lock()
	session := e.Params.SessionID
	if e.Method == "" && id != "" {
		if c.initAnswer != nil && id == c.initID {
			answer := c.initAnswer
			c.initAnswer = nil
			c.mu.Unlock()
			answer <- msg
			return nil
		}
		session = c.routes[id]
		delete(c.routes, id)
	}
	s := c.streamLocked(session)
	s.events = append(s.events, sseEvent{id: s.nextID, data: msg})
	s.nextID++
	s.bytes += len(msg)
	for len(s.events) > streamKeep || s.bytes > streamKeepBytes {
		if s.events[0].id > s.sent {
			// Never sent, and no room: the client is not reading.
			c.mu.Unlock()
			c.h.opts.Log.Warn("ending an /acp connection whose client does not read its messages", "connection", c.id)
			c.cancel()
			return errConnectionGone
		}
		s.bytes -= len(s.events[0].data)
		s.events = s.events[1:]
	}
	c.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// streamLocked returns session's stream, made when new. c.mu is held.
func (c *httpConn) streamLocked(session string) *sseStream {
	s := c.streams[session]
	if s == nil {
		s = newStream()
		c.streams[session] = s
	}
	return s
}

// begin and end bracket a request of the connection, for its idle timer.
func (c *httpConn) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active++
	c.idle.Stop()
}

func (c *httpConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active--; c.active == 0 {
		c.idle.Reset(c.h.opts.HTTPIdleTimeout)
	}
}

// serveHTTP serves the Streamable HTTP profile: POST, GET (SSE), DELETE.
func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request, opts bridge.Options) {
	id := r.Header.Get(HeaderConnectionID)
	if r.Method == http.MethodPost && id == "" {
		h.initialize(w, r, opts)
		return
	}
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if id == "" {
		http.Error(w, "missing "+HeaderConnectionID, http.StatusBadRequest)
		return
	}
	c := h.conn(id, auth.User(r.Context()))
	if c == nil {
		http.Error(w, "unknown "+HeaderConnectionID, http.StatusNotFound)
		return
	}
	c.begin()
	defer c.end()
	switch r.Method {
	case http.MethodPost:
		h.post(w, r, c)
	case http.MethodGet:
		h.sse(w, r, c)
	case http.MethodDelete:
		c.cancel()
		w.WriteHeader(http.StatusAccepted)
	}
}

// conn returns connection id when user holds it: another user's is as
// unknown as one that never was.
func (h *Handler) conn(id, user string) *httpConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.conns[id]
	if c == nil || c.user != user || c.ctx.Err() != nil {
		return nil
	}
	return c
}

// readMessage reads the JSON-RPC message of a POST, or answers the POST
// with what is wrong with it.
func (h *Handler) readMessage(w http.ResponseWriter, r *http.Request) ([]byte, *envelope, bool) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return nil, nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.opts.ReadMaxBytes)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("a message over %d bytes", h.opts.ReadMaxBytes), http.StatusRequestEntityTooLarge)
		return nil, nil, false
	case err != nil:
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		http.Error(w, "JSON-RPC batches are not supported", http.StatusNotImplemented)
		return nil, nil, false
	}
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, "not a JSON-RPC message: "+err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	return body, &e, true
}

// initialize opens a connection with its initialize request, and answers
// the POST with the bridge's answer and the connection's id.
func (h *Handler) initialize(w http.ResponseWriter, r *http.Request, opts bridge.Options) {
	body, e, ok := h.readMessage(w, r)
	if !ok {
		return
	}
	if e.Method != "initialize" || len(e.ID) == 0 {
		http.Error(w, "the first message of a connection is initialize, without "+HeaderConnectionID, http.StatusBadRequest)
		return
	}
	user := auth.User(r.Context())
	// The connection outlives this request: it keeps its values (the
	// user, the peer), not its end; it ends with the handler.
	ctx, cancel := context.WithCancel(withPeer(context.WithoutCancel(r.Context()), r.RemoteAddr))
	stopWithHandler := context.AfterFunc(h.base, cancel)
	answer := make(chan []byte, 1)
	c := &httpConn{
		id: newConnectionID(), user: user, h: h, ctx: ctx, cancel: cancel,
		in:      make(chan []byte, 16),
		streams: map[string]*sseStream{"": newStream()},
		routes:  map[string]string{},
		initID:  string(e.ID), initAnswer: answer,
		active: 1,
	}
	c.idle = time.AfterFunc(h.opts.HTTPIdleTimeout, cancel)
	c.idle.Stop() // until the initialize request ends
	if err := h.add(c); err != nil {
		cancel()
		stopWithHandler()
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	closed := h.opts.Opened("http")
	h.wg.Go(func() {
		defer func() {
			stopWithHandler()
			c.idle.Stop()
			h.remove(c)
			closed()
		}()
		h.serve(ctx, c, opts)
	})
	defer c.end()
	c.in <- body
	t := time.NewTimer(initializeTimeout)
	defer t.Stop()
	select {
	case msg := <-answer:
		w.Header().Set(HeaderConnectionID, c.id)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(msg)
	case <-r.Context().Done():
		cancel()
	case <-t.C:
		cancel()
		http.Error(w, "initialize was not answered", http.StatusServiceUnavailable)
	case <-ctx.Done():
		http.Error(w, "the connection ended", http.StatusServiceUnavailable)
	}
}

// add registers c, within the bounds.
func (h *Handler) add(c *httpConn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.conns) >= h.opts.MaxHTTPConnections {
		return errors.New("too many ACP connections")
	}
	if err := h.reserveLocked(c.user); err != nil {
		return err
	}
	h.conns[c.id] = c
	return nil
}

func (h *Handler) remove(c *httpConn) {
	h.mu.Lock()
	delete(h.conns, c.id)
	h.mu.Unlock()
	h.release(c.user)
}

// post hands a message to the connection's bridge and answers 202.
func (h *Handler) post(w http.ResponseWriter, r *http.Request, c *httpConn) {
	body, e, ok := h.readMessage(w, r)
	if !ok {
		return
	}
	session := r.Header.Get(HeaderSessionID)
	switch sid := e.Params.SessionID; {
	case sid != "" && session == "":
		http.Error(w, "a session's message needs "+HeaderSessionID, http.StatusBadRequest)
		return
	case sid != "" && sid != session:
		http.Error(w, HeaderSessionID+" is not the message's sessionId", http.StatusBadRequest)
		return
	}
	if session != "" && e.Method != "" && len(e.ID) > 0 {
		c.mu.Lock()
		c.routes[string(e.ID)] = session
		c.mu.Unlock()
	}
	select {
	case c.in <- body:
		w.WriteHeader(http.StatusAccepted)
	case <-c.ctx.Done():
		http.Error(w, "the connection ended", http.StatusNotFound)
	case <-r.Context().Done():
	}
}

// sse serves one of the connection's SSE streams: the session's named by
// Acp-Session-Id, else the connection's. Each event's id numbers it in its
// stream; a client that comes back with Last-Event-ID gets what came after
// it, when the stream still holds it (409 when it does not: load the
// session again).
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, c *httpConn) {
	if !acceptsEventStream(r) {
		http.Error(w, "Accept must include text/event-stream", http.StatusNotAcceptable)
		return
	}
	session := r.Header.Get(HeaderSessionID)
	if session != "" {
		c.mu.Lock()
		_, known := c.streams[session]
		c.mu.Unlock()
		// A session the bridge has not touched yet (before session/load)
		// must be one the user may see.
		if !known {
			if _, err := h.client.GetSession(withPeer(r.Context(), r.RemoteAddr), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: session})); err != nil {
				http.Error(w, "unknown session", http.StatusNotFound)
				return
			}
		}
	}
	c.mu.Lock()
	s := c.streamLocked(session)
	after := s.sent
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= s.nextID || len(s.events) > 0 && n+1 < s.events[0].id {
			c.mu.Unlock()
			http.Error(w, "Last-Event-ID is not in this stream any more", http.StatusConflict)
			return
		}
		after = n
	}
	if s.reader != nil {
		close(s.reader) // the previous GET ends
	}
	mine := make(chan struct{})
	s.reader = mine
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if s.reader == mine {
			s.reader = nil
		}
		c.mu.Unlock()
	}()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	ping := time.NewTicker(h.pingEvery())
	defer ping.Stop()
	for {
		c.mu.Lock()
		var batch []sseEvent
		if n := len(s.events); n > 0 && s.events[n-1].id > after {
			// The kept events' ids follow one another: those after after
			// start at its place, not found by a scan of every one.
			first := s.events[0].id
			batch = slices.Clone(s.events[max(after+1, first)-first:])
		}
		c.mu.Unlock()
		if len(batch) > 0 {
			var buf bytes.Buffer
			for _, ev := range batch {
				fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", ev.id, ev.data)
			}
			if !h.write(rc, w, buf.Bytes()) {
				return
			}
			after = batch[len(batch)-1].id
			c.mu.Lock()
			s.sent = max(s.sent, after)
			c.mu.Unlock()
		}
		select {
		case <-s.wake:
		case <-ping.C:
			if !h.write(rc, w, []byte(": ping\n\n")) {
				return
			}
		case <-mine:
			return
		case <-c.ctx.Done():
			return
		case <-r.Context().Done():
			return
		}
	}
}

// write writes and flushes b within the write timeout.
func (h *Handler) write(rc *http.ResponseController, w io.Writer, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

func (h *Handler) pingEvery() time.Duration {
	if h.opts.PingInterval > 0 {
		return h.opts.PingInterval
	}
	return DefaultPingInterval
}

// acceptsEventStream reports whether r accepts text/event-stream.
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if mt == "text/event-stream" || mt == "*/*" || mt == "text/*" {
				return true
			}
		}
	}
	return false
}
