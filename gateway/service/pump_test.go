package service_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/flush"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// flushCounter is a ResponseWriter that records, at each flush, how much
// of the body was written.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushedAt []int
}

func (f *flushCounter) Flush() { f.flushedAt = append(f.flushedAt, f.Body.Len()) }

// envelopes splits a Connect streaming body into its envelopes' flags and
// payloads, and the body offsets at which they end.
func envelopes(t *testing.T, body []byte) (flags []byte, payloads [][]byte, ends map[int]bool) {
	t.Helper()
	ends = map[int]bool{}
	for r := bytes.NewReader(body); r.Len() > 0; {
		f, p, err := testutil.ReadEnvelope(r)
		if err != nil {
			t.Fatalf("at %d: %v", len(body)-r.Len(), err)
		}
		flags, payloads = append(flags, f), append(payloads, p)
		ends[len(body)-r.Len()] = true
	}
	return flags, payloads, ends
}

// A stream sends the events at hand in batches with one flush each, not a
// flush per event; every flush falls between whole messages.
func TestStreamFlushesOncePerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const id, n = "s1", 200
	store := closedSession(t, id, n, func(i int) string { return fmt.Sprint(i) })
	// No gateway runs the session: the watch follows the store, and ends
	// after the closed event.
	mgr := session.NewManager(session.Options{Store: store, IdleTimeout: -1})
	defer mgr.Close()
	req, err := proto.Marshal(&acpv2.WatchRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	// A zero heartbeat is DefaultHeartbeat: the stream does not spin on
	// heartbeats (it would until ctx ends).
	for _, heartbeat := range []time.Duration{time.Minute, 0} {
		t.Run(fmt.Sprint("heartbeat ", heartbeat), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, h := acpv2connect.NewSessionServiceHandler(service.New(mgr, service.WithHeartbeat(heartbeat)))
			h = flush.Holdable(h, func(*http.Request) bool { return true })
			r := httptest.NewRequestWithContext(ctx, "POST", acpv2connect.SessionServiceWatchProcedure, bytes.NewReader(testutil.Envelope(0, req)))
			r.Header.Set("Content-Type", "application/connect+proto")
			w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
			h.ServeHTTP(w, r)
			checkBatches(t, w, n)
		})
	}
}

// closedSession returns a memory store holding session id: n agent
// message chunks, the ith of text(i), then the closed event.
func closedSession(t *testing.T, id string, n int, text func(i int) string) statestore.Store {
	t.Helper()
	ctx := context.Background()
	store := statestore.NewMemory(statestore.Options{})
	if err := store.CreateSession(ctx, &statestore.Session{ID: id, Agent: "a", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var events []*acpv2.SessionEvent
	for i := 1; i <= n; i++ {
		events = append(events, &acpv2.SessionEvent{Seq: uint64(i), Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: text(i)}}}}}})
	}
	events = append(events, &acpv2.SessionEvent{Seq: uint64(n) + 1, Event: &acpv2.SessionEvent_StateChanged{
		StateChanged: &acpv2.SessionStateChanged{State: string(statestore.StateClosed)}}})
	if err := store.Append(ctx, id, storetest.Encode(t, events...), nil); err != nil {
		t.Fatal(err)
	}
	return store
}

// checkBatches checks the body w got for a watch of n events and the
// closed event: the opening heartbeat, the events, the end, and few
// flushes, each between messages.
func checkBatches(t *testing.T, w *flushCounter, n int) {
	t.Helper()
	flags, payloads, ends := envelopes(t, w.Body.Bytes())
	if len(flags) != n+3 || flags[len(flags)-1] != 2 {
		t.Fatalf("%d envelopes (last flags %v), want the heartbeat, %d events and the end", len(flags), flags[len(flags)-1], n+1)
	}
	for i, p := range payloads[1 : n+2] {
		var msg acpv2.WatchResponse
		if err := proto.Unmarshal(p, &msg); err != nil || msg.GetEvent().GetSeq() != uint64(i+1) {
			t.Fatalf("message %d: %v, err %v", i+1, &msg, err)
		}
	}
	for _, at := range w.flushedAt {
		if !ends[at] {
			t.Fatalf("a flush at %d, inside a message", at)
		}
	}
	// The heartbeat, a few batches, the end; not one per event.
	if len(w.flushedAt) > 10 {
		t.Fatalf("%d flushes for %d messages", len(w.flushedAt), len(flags))
	}
	t.Logf("%d messages, %d flushes", len(flags), len(w.flushedAt))
}
