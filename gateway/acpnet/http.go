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
	// resumer is the bridge's, which takes a session up from a position
	// (Bind).
	resumer bridge.Resumer
}

// sseStream is the messages of one SSE stream, in order (n, from 1); it
// keeps the last streamKeep for Last-Event-ID. The connection's stream
// numbers its events by n. A session's stream names each by its place in
// the session's log: a message made from event SEQ is "SEQ" (or "SEQ.PART"
// when the event made several and it is not the last), and any other
// message (an answer, a request to the client) "POSITION:N", the Nth since
// the last such place.
type sseStream struct {
	events []sseEvent
	bytes  int
	next   uint64
	// sent is the last message (n) written to a client.
	sent uint64
	// wake is signalled when a message comes.
	wake chan struct{}
	// reader is the GET now serving the stream; a new GET takes over.
	reader chan struct{}

	// session: the stream is a session's, whose messages are named by
	// their place in its log: at, and extra messages since that no event
	// made.
	session bool
	at      bridge.Position
	extra   int
	// from is the Last-Event-ID the stream was taken up from on this
	// connection (Resume), and skip the parts of a partly had event that
	// its client had, which are not sent again.
	from string
	skip bridge.Position
	// resuming: a GET is taking the session up on this connection (its
	// Resume, which checks that the user may see it, has not returned);
	// another GET of the stream meanwhile is refused.
	resuming bool
}

type sseEvent struct {
	n    uint64
	id   string
	data []byte
}

func newStream(session bool) *sseStream {
	return &sseStream{next: 1, wake: make(chan struct{}, 1), session: session}
}

// after returns the n of the message that SSE event id names in s, for a
// GET that resumes after it.
func (s *sseStream) after(id string) (uint64, bool) {
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].id == id {
			return s.events[i].n, true
		}
	}
	if id == s.from && (len(s.events) == 0 || s.events[0].n == 1) {
		return 0, true
	}
	return 0, false
}

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
	id = strconv.FormatUint(s.next, 10)
	if s.session {
		s.extra++
		id = s.at.String() + ":" + strconv.Itoa(s.extra)
	}
	return c.appendLocked(s, id, msg)
}

// WriteAt implements bridge.Positioned: msg goes to the session's stream,
// named by its place in the session's log; a part of an event that a
// resumed client had is dropped.
func (c *httpConn) WriteAt(session string, at bridge.Position, msg []byte) error {
	c.mu.Lock()
	s := c.streamLocked(session)
	if at.Part != 0 && at.Seq == s.skip.Seq && at.Part <= s.skip.Part {
		c.mu.Unlock()
		return nil
	}
	s.at, s.extra = at, 0
	return c.appendLocked(s, at.String(), msg)
}

// Reached implements bridge.Positioned.
func (c *httpConn) Reached(session string, at bridge.Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.streamLocked(session); s.at.Before(at) {
		s.at, s.extra = at, 0
	}
}

// Bind implements bridge.Positioned.
func (c *httpConn) Bind(r bridge.Resumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resumer = r
}

// appendLocked adds message msg, named id, to stream s and wakes its
// reader. c.mu is held, and let go.
func (c *httpConn) appendLocked(s *sseStream, id string, msg []byte) error {
	s.events = append(s.events, sseEvent{n: s.next, id: id, data: msg})
	s.next++
	s.bytes += len(msg)
	for len(s.events) > streamKeep || s.bytes > streamKeepBytes {
		if s.events[0].n > s.sent {
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
		s = newStream(session != "")
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
		streams: map[string]*sseStream{"": newStream(false)},
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
// Acp-Session-Id, else the connection's. A client that comes back with
// Last-Event-ID gets what came after that event: from the stream, when
// this connection's stream holds it (409 when it does not any more); or,
// for a session's stream this connection has not had yet, from the
// session's log, from the place the id names (the session's stream on
// another connection, perhaps on another replica), and then live.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, c *httpConn) {
	if !acceptsEventStream(r) {
		http.Error(w, "Accept must include text/event-stream", http.StatusNotAcceptable)
		return
	}
	session := r.Header.Get(HeaderSessionID)
	lastID := r.Header.Get("Last-Event-ID")
	resumed := false
	if session != "" {
		c.mu.Lock()
		s, known := c.streams[session]
		resuming := known && s.resuming
		c.mu.Unlock()
		switch {
		case resuming:
			http.Error(w, "the session's stream is being taken up on this connection", http.StatusConflict)
			return
		case !known && lastID != "":
			if !h.resume(w, r, c, session, lastID) {
				return
			}
			// The whole stream comes after lastID, which it may hold:
			// a message no event made, asked again, may follow the
			// place of lastID, and is sent all the same.
			resumed = true
		case !known:
			// A session the bridge has not touched yet (before
			// session/load) must be one the user may see.
			if _, err := h.client.GetSession(withPeer(r.Context(), r.RemoteAddr), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: session})); err != nil {
				http.Error(w, "unknown session", http.StatusNotFound)
				return
			}
		}
	}
	c.mu.Lock()
	s := c.streamLocked(session)
	after := s.sent
	if lastID != "" && !resumed {
		n, ok := s.after(lastID)
		if !ok {
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
		if n := len(s.events); n > 0 && s.events[n-1].n > after {
			// The kept events' ns follow one another: those after after
			// start at its place, not found by a scan of every one.
			first := s.events[0].n
			batch = slices.Clone(s.events[max(after+1, first)-first:])
		}
		c.mu.Unlock()
		if len(batch) > 0 {
			var buf bytes.Buffer
			for _, ev := range batch {
				fmt.Fprintf(&buf, "id: %s\ndata: %s\n\n", ev.id, ev.data)
			}
			if !h.write(rc, w, buf.Bytes()) {
				return
			}
			after = batch[len(batch)-1].n
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

// resume takes session up on connection c from the place in its log that
// SSE event id lastID names, for a client that had the session's stream
// up to it on another connection, or answers why not.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c *httpConn, session, lastID string) bool {
	at, err := bridge.ParsePosition(lastID)
	if err != nil {
		http.Error(w, "Last-Event-ID: "+err.Error(), http.StatusBadRequest)
		return false
	}
	c.mu.Lock()
	resumer := c.resumer
	s := c.streamLocked(session)
	s.from, s.resuming = lastID, true
	if at.Part != 0 {
		s.skip = at
	}
	// The messages no event made that follow at here are numbered on
	// from the client's: "PLACE:N" names one message of this stream, not
	// both the client's last on the old connection and one asked again.
	s.at, s.extra = at, extraOf(lastID)
	c.mu.Unlock()
	if resumer != nil {
		err = resumer.Resume(withPeer(r.Context(), r.RemoteAddr), session, at)
	} else {
		err = bridge.ErrAttached
	}
	c.mu.Lock()
	s.resuming = false
	if err != nil && c.streams[session] == s && len(s.events) == 0 {
		delete(c.streams, session)
	}
	c.mu.Unlock()
	if err == nil {
		return true
	}
	switch code := connect.CodeOf(err); {
	case errors.Is(err, bridge.ErrAttached):
		http.Error(w, "this connection has the session already: Last-Event-ID is not in its stream", http.StatusConflict)
	case code == connect.CodeNotFound || code == connect.CodePermissionDenied:
		http.Error(w, "unknown session", http.StatusNotFound)
	case code == connect.CodeOutOfRange || code == connect.CodeFailedPrecondition:
		http.Error(w, "Last-Event-ID: "+connectMessage(err), http.StatusConflict)
	case r.Context().Err() != nil:
	default:
		h.opts.Log.Warn("resuming an /acp session stream", "session", session, "error", err)
		http.Error(w, "the session could not be resumed: "+connectMessage(err), http.StatusServiceUnavailable)
	}
	return false
}

// extraOf returns N of an SSE event id "PLACE:N", the Nth message no event
// made after PLACE; 0 for another id.
func extraOf(id string) int {
	_, n, ok := strings.Cut(id, ":")
	if !ok {
		return 0
	}
	extra, err := strconv.Atoi(n)
	if err != nil || extra < 0 {
		return 0
	}
	return extra
}

// connectMessage is err's message without its code.
func connectMessage(err error) string {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
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
