package session

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

const (
	formElicitation = `{"sessionId":"a","mode":"form","message":"Your details","requestedSchema":{"type":"object",` +
		`"properties":{"name":{"type":"string"},"age":{"type":"integer"},"tea":{"type":"boolean"},` +
		`"size":{"type":"string","enum":["s","m"]},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},` +
		`"required":["name"]}}`
	urlElicitation = `{"sessionId":"a","mode":"url","message":"Log in","url":"https://example.com/login","elicitationId":"e-1"}`
)

func content(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	c, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// elicitationEvents returns the session's stored elicitation events.
func elicitationEvents(t *testing.T, s *Session) []*acpv2.SessionEvent {
	t.Helper()
	stored(t, s)
	events, err := decoded(t)(s.m.opts.Store.Events(context.Background(), s.rec.ID, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var out []*acpv2.SessionEvent
	for _, ev := range events {
		if ev.GetElicitationRequest() != nil || ev.GetElicitationResolved() != nil || ev.GetElicitationComplete() != nil {
			out = append(out, ev)
		}
	}
	return out
}

// A form elicitation is stored as an elicitationRequest with its schema,
// shows in the snapshot while it waits, and is answered once: the agent
// gets the accepted content, the log an elicitationResolved that says who
// answered, and a second answer is refused.
func TestFormElicitationAccepted(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{}, acpjson.V1)
	answer, _, err := s.Elicit([]byte(formElicitation))
	if err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if len(snap.GetPendingElicitations()) != 1 || snap.GetPendingElicitations()[0].GetRequestId() != "elicit-1" {
		t.Fatalf("pending elicitations = %v, want elicit-1", snap.GetPendingElicitations())
	}
	c := content(t, map[string]any{"name": "Ada", "age": 36, "tea": true, "size": "m", "tags": []any{"a"}})
	if err := s.RespondElicitation("elicit-1", "accept", c, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.RespondElicitation("elicit-1", "decline", nil, "bob"); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("a second answer: %v, want ErrAlreadyAnswered", err)
	}
	got := <-answer
	if got.GetAction() != "accept" || !proto.Equal(got.GetContent(), c) {
		t.Fatalf("the agent got %v, want accept with the content", got)
	}
	if n := len(s.Snapshot().GetPendingElicitations()); n != 0 {
		t.Fatalf("%d elicitations pending once answered, want none", n)
	}
	events := elicitationEvents(t, s)
	if len(events) != 2 {
		t.Fatalf("elicitation events = %v, want the request and its resolution", events)
	}
	req := events[0].GetElicitationRequest()
	if req.GetRequestId() != "elicit-1" || req.GetMode() != "form" || req.GetMessage() != "Your details" ||
		req.GetRequestedSchema().GetFields()["required"].GetListValue().GetValues()[0].GetStringValue() != "name" {
		t.Fatalf("stored request = %v", req)
	}
	res := events[1].GetElicitationResolved()
	if res.GetRequestId() != "elicit-1" || res.GetAction() != "accept" || res.GetAnsweredBy() != "user:alice" || !proto.Equal(res.GetContent(), c) {
		t.Fatalf("stored resolution = %v, want accept by user:alice with the content", res)
	}
}

// Accepted content is checked against the requested schema's top-level
// properties: types, enums, required, unknown names; refused content
// leaves the elicitation pending.
func TestElicitationContentIsChecked(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{}, acpjson.V2)
	if _, _, err := s.Elicit([]byte(formElicitation)); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]map[string]any{
		"missing required":    {"age": 3},
		"string for integer":  {"name": "a", "age": "3"},
		"fraction as integer": {"name": "a", "age": 3.5},
		"number for boolean":  {"name": "a", "tea": 1},
		"not in enum":         {"name": "a", "size": "xl"},
		"item not in enum":    {"name": "a", "tags": []any{"c"}},
		"array of numbers":    {"name": "a", "tags": []any{1}},
		"unknown property":    {"name": "a", "colour": "red"},
		"number for string":   {"name": 3},
		"object value":        {"name": "a", "size": map[string]any{"k": "v"}},
	} {
		if err := s.RespondElicitation("elicit-1", "accept", content(t, c), ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := s.RespondElicitation("elicit-1", "decline", content(t, map[string]any{"name": "a"}), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("decline with content: %v, want ErrInvalid", err)
	}
	if err := s.RespondElicitation("elicit-1", "maybe", nil, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("an unknown action: %v, want ErrInvalid", err)
	}
	if err := s.RespondElicitation("perm-1", "decline", nil, ""); !errors.Is(err, ErrNoRequest) {
		t.Errorf("an unknown request: %v, want ErrNoRequest", err)
	}
	if n := len(s.Snapshot().GetPendingElicitations()); n != 1 {
		t.Fatalf("%d elicitations pending after refused answers, want 1", n)
	}
}

// A url elicitation carries its url and elicitation id, takes no content,
// is declined as a user declines it, and the agent's elicitation/complete
// is relayed as an elicitationComplete event.
func TestURLElicitationDeclinedAndCompleted(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{}, acpjson.V2)
	answer, _, err := s.Elicit([]byte(urlElicitation))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RespondElicitation("elicit-1", "accept", content(t, map[string]any{"x": "y"}), ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("url accept with content: %v, want ErrInvalid", err)
	}
	if err := s.RespondElicitation("elicit-1", "decline", nil, ""); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; got.GetAction() != "decline" || got.GetContent() != nil {
		t.Fatalf("the agent got %v, want decline", got)
	}
	s.ElicitationComplete([]byte(`{"elicitationId":"e-1"}`))
	s.ElicitationComplete([]byte(`{"elicitationId":3}`)) // malformed: dropped
	events := elicitationEvents(t, s)
	if len(events) != 3 {
		t.Fatalf("elicitation events = %v, want request, resolution, completion", events)
	}
	if req := events[0].GetElicitationRequest(); req.GetUrl() != "https://example.com/login" || req.GetElicitationId() != "e-1" {
		t.Fatalf("stored request = %v", req)
	}
	if res := events[1].GetElicitationResolved(); res.GetAction() != "decline" || res.GetAnsweredBy() != "user" {
		t.Fatalf("stored resolution = %v, want decline by user", res)
	}
	if c := events[2].GetElicitationComplete(); c.GetElicitationId() != "e-1" {
		t.Fatalf("completion = %v, want e-1", c)
	}
}

// An elicitation nobody answers within PermissionTimeout is cancelled
// (answered by timeout), one the agent withdraws is cancelled answered by
// the agent, and a user's cancel is a cancel by the user. A permission
// request id is not an elicitation's, nor the other way round.
func TestElicitationEndsWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{PermissionTimeout: 50 * time.Millisecond}, acpjson.V2)
	timedOut, _, err := s.Elicit([]byte(urlElicitation))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-timedOut; got.GetAction() != "cancel" {
		t.Fatalf("a timed-out elicitation answered %v, want cancel", got)
	}
	// Withdrawn before the timeout can strike: the timer is not armed
	// until the request is stored, and withdraw runs at once.
	withdrawn, withdraw, err := s.Elicit([]byte(formElicitation))
	if err != nil {
		t.Fatal(err)
	}
	withdraw()
	if got := <-withdrawn; got.GetAction() != "cancel" {
		t.Fatalf("a withdrawn elicitation answered %v, want cancel", got)
	}
	perm, _, err := s.RequestPermission([]byte(`{"toolCall":{"toolCallId":"c"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	permID := s.Snapshot().GetLastSeq()
	if err := s.RespondElicitation("perm-"+strconv.FormatUint(permID, 10), "cancel", nil, ""); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("RespondElicitation on a permission request: %v, want ErrNoRequest", err)
	}
	if err := s.RespondPermission("elicit-1", "ok", false, ""); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("RespondPermission on an elicitation: %v, want ErrNoRequest", err)
	}
	<-perm // the timeout answers it
	var by []string
	for _, ev := range elicitationEvents(t, s) {
		if r := ev.GetElicitationResolved(); r != nil {
			by = append(by, r.GetAnsweredBy())
		}
	}
	if len(by) != 2 || by[0] != AnsweredByTimeout || by[1] != AnsweredByAgent {
		t.Fatalf("elicitations answered by %q, want timeout then agent", by)
	}
}

// The pending elicitations count toward --max-pending-permissions with
// the permission requests.
func TestElicitationsShareThePendingLimit(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{MaxPendingPermissions: 1}, acpjson.V2)
	if _, _, err := s.Elicit([]byte(urlElicitation)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RequestPermission([]byte(`{"toolCall":{"toolCallId":"c"},"options":[]}`)); err == nil {
		t.Fatal("a permission request past the limit was taken")
	}
	if _, _, err := s.Elicit([]byte(urlElicitation)); err == nil {
		t.Fatal("an elicitation past the limit was taken")
	}
}

// A malformed elicitation is refused with what is wrong, and nothing is
// stored.
func TestMalformedElicitationIsRefused(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{}, acpjson.V2)
	for _, params := range []string{
		`{"message":"no mode"}`,
		`{"mode":"form","message":"no schema"}`,
		`{"mode":"url","message":"no url","elicitationId":"e"}`,
		`{"mode":"url","url":"https://x","message":"no id"}`,
		`[]`,
	} {
		if _, _, err := s.Elicit([]byte(params)); err == nil {
			t.Errorf("%s was taken", params)
		}
	}
	if events := elicitationEvents(t, s); len(events) != 0 {
		t.Fatalf("stored %v after malformed elicitations", events)
	}
}

// A Watch from before what retention kept starts with a snapshot, which
// holds the elicitations still pending although their events are gone.
func TestRetentionSnapshotHoldsPendingElicitations(t *testing.T) {
	t.Parallel()
	_, s := storedSession(t, Options{Store: statestore.NewMemory(statestore.Options{MaxEvents: 2})}, acpjson.V2)
	if _, _, err := s.Elicit([]byte(urlElicitation)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.ElicitationComplete([]byte(`{"elicitationId":"other"}`))
	}
	stored(t, s)
	sub := s.Watch(0)
	defer sub.Close()
	dst := make([]*encoded.Event, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := sub.NextBatch(ctx, dst)
	if err != nil || n == 0 {
		t.Fatalf("NextBatch: %d, %v", n, err)
	}
	msg, err := dst[0].Message()
	if err != nil {
		t.Fatal(err)
	}
	pending := msg.GetSnapshot().GetPendingElicitations()
	if len(pending) != 1 || pending[0].GetRequestId() != "elicit-1" || pending[0].GetUrl() != "https://example.com/login" {
		t.Fatalf("the first event is %v, want a snapshot with elicit-1 pending", msg)
	}
}
