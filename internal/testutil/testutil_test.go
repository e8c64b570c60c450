package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// fakeT records the first failure of a check and stops it there, as
// t.Fatal would.
type fakeT struct {
	testing.TB
	failed string
}

type stopped struct{}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	panic(stopped{})
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(stopped{})
}

// failure runs check with a fakeT and returns its failure, "" if none.
func failure(check func(testing.TB)) (msg string) {
	f := &fakeT{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
		msg = f.failed
	}()
	check(f)
	return ""
}

func update(id, title string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{
		ToolCallId: id, Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: title}}}}}
}

func merged(id, title string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{ToolCallId: id, Title: title}}}
}

func message() *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{}}}
}

func numbered(events ...*acpv2.SessionEvent) []*acpv2.SessionEvent {
	for i, ev := range events {
		ev.Seq = uint64(i + 1)
	}
	return events
}

func TestCheckReplay(t *testing.T) {
	snap := []*acpv2.ToolCall{{ToolCallId: "a", Title: "two"}, {ToolCallId: "b", Title: "b"}}
	good := func() []*acpv2.SessionEvent {
		return numbered(message(), update("a", "one"), merged("a", "one"), update("b", "b"), merged("b", "b"), update("a", "two"), merged("a", "two"))
	}
	if msg := failure(func(t testing.TB) { CheckReplay(t, good(), snap) }); msg != "" {
		t.Fatalf("a consistent log failed: %s", msg)
	}
	for name, c := range map[string]struct {
		events func() []*acpv2.SessionEvent
		snap   []*acpv2.ToolCall
		says   string
	}{
		"a merged call that differs": {func() []*acpv2.SessionEvent {
			e := good()
			e[2] = merged("a", "other")
			e[2].Seq = 3
			return e
		}, snap, "merged tool call"},
		"a merged call without its delta": {func() []*acpv2.SessionEvent { return numbered(message(), merged("a", "one")) }, nil, "merged tool call"},
		"a delta followed by another delta": {func() []*acpv2.SessionEvent {
			return numbered(update("a", "one"), update("a", "two"), merged("a", "two"))
		}, snap[:1], "not followed by its merged tool_call"},
		"a delta followed by another event": {func() []*acpv2.SessionEvent {
			return numbered(update("a", "two"), message(), merged("a", "two"))
		}, snap[:1], "not followed by its merged tool_call"},
		"a delta at the end":      {func() []*acpv2.SessionEvent { return numbered(update("a", "two")) }, snap[:1], "the last delta"},
		"a snapshot that differs": {good, []*acpv2.ToolCall{snap[1], snap[0]}, "tool call 0"},
		"a snapshot short of one": {good, snap[:1], "has 1 tool calls, the replay 2"},
		"a delta without an id": {func() []*acpv2.SessionEvent {
			return numbered(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{}}})
		}, nil, "empty tool_call_id"},
		"a permission preview that differs": {func() []*acpv2.SessionEvent {
			e := good()
			return append(e, &acpv2.SessionEvent{Seq: 8, Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: &acpv2.PermissionRequest{
				ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "a", Status: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "x"}}},
				Preview:  &acpv2.ToolCall{ToolCallId: "a", Title: "two"},
			}}})
		}, snap, "permission preview"},
	} {
		if msg := failure(func(t testing.TB) { CheckReplay(t, c.events(), c.snap) }); !strings.Contains(msg, c.says) {
			t.Errorf("%s: the check said %q, want a failure mentioning %q", name, msg, c.says)
		}
	}
	// The preview check passes when the preview is right.
	withPreview := append(good(), &acpv2.SessionEvent{Seq: 8, Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: &acpv2.PermissionRequest{
		ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "a", RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: structpb.NewNumberValue(1)}}},
		Preview:  &acpv2.ToolCall{ToolCallId: "a", Title: "two", RawInput: structpb.NewNumberValue(1)},
	}}})
	if msg := failure(func(t testing.TB) { CheckReplay(t, withPreview, snap) }); msg != "" {
		t.Fatalf("a right preview failed: %s", msg)
	}
}

func TestCheckSeqs(t *testing.T) {
	events := numbered(message(), message(), message())
	if msg := failure(func(t testing.TB) { CheckSeqs(t, events, 1) }); msg != "" {
		t.Fatalf("contiguous seqs failed: %s", msg)
	}
	if msg := failure(func(t testing.TB) { CheckSeqs(t, events, 2) }); !strings.Contains(msg, "event 0 has seq 1, want 2") {
		t.Fatalf("seqs from 1 checked from 2: %q", msg)
	}
	gap := numbered(message(), message(), message())
	gap[2].Seq = 4
	if msg := failure(func(t testing.TB) { CheckSeqs(t, gap, 1) }); !strings.Contains(msg, "event 2 has seq 4, want 3") {
		t.Fatalf("a gap: %q", msg)
	}
}

func TestEnvelope(t *testing.T) {
	got := Envelope(2, []byte("hi"))
	if want := []byte{2, 0, 0, 0, 2, 'h', 'i'}; string(got) != string(want) {
		t.Fatalf("Envelope = %v, want %v", got, want)
	}
	r := bytes.NewReader(append(Envelope(0, []byte("one")), Envelope(2, nil)...))
	for _, want := range []struct {
		flags byte
		data  string
	}{{0, "one"}, {2, ""}} {
		flags, data, err := ReadEnvelope(r)
		if err != nil || flags != want.flags || string(data) != want.data {
			t.Fatalf("ReadEnvelope = %d %q %v, want %d %q", flags, data, err, want.flags, want.data)
		}
	}
	if _, _, err := ReadEnvelope(r); !errors.Is(err, io.EOF) {
		t.Fatalf("ReadEnvelope at the end: %v, want EOF", err)
	}
	if _, _, err := ReadEnvelope(bytes.NewReader(Envelope(0, []byte("cut"))[:6])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadEnvelope of a cut message: %v, want unexpected EOF", err)
	}
}

// errorsT records Errorf calls instead of failing the test.
type errorsT struct {
	testing.TB
	errs []string
}

func (e *errorsT) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func TestServe(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") })}
	base, stop := Serve(t, func(l net.Listener) error {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, srv.Shutdown)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := hc.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(body) != "hi" {
		t.Fatalf("GET %s: %q %v", base, body, err)
	}
	stop()
	stop() // again: nothing to do
	if _, err := hc.Get(base); err == nil {
		t.Fatalf("GET %s answered after stop", base)
	}

	// A server that fails is reported, once.
	rec := &errorsT{TB: t}
	_, stop = Serve(rec, func(l net.Listener) error {
		l.Close()
		return errors.New("no more connections")
	}, func(context.Context) error { return errors.New("not stopped") })
	stop()
	stop()
	if want := []string{"shutdown: not stopped", "serve: no more connections"}; !slices.Equal(rec.errs, want) {
		t.Fatalf("the failing server gave %q, want %q", rec.errs, want)
	}
}

func TestSameJSON(t *testing.T) {
	for _, c := range []struct{ got, want, fails string }{
		{`{"a":1,"b":[true,null]}`, `{"b": [true, null], "a": 1.0}`, ""},
		{`1e21`, `1e+21`, ""},
		{`{"a":"1"}`, `{"a":1}`, "JSON differs"},
		{`{"a":1}`, `{"a":1,"b":null}`, "JSON differs"},
		{`[1,2]`, `[2,1]`, "JSON differs"},
		{`{"a":`, `{}`, "not JSON"},
		{`{}`, `nope`, "not JSON"},
	} {
		msg := failure(func(t testing.TB) { SameJSON(t, []byte(c.got), []byte(c.want)) })
		if c.fails == "" && msg != "" || !strings.Contains(msg, c.fails) {
			t.Errorf("SameJSON(%s, %s): failure %q, want one with %q", c.got, c.want, msg, c.fails)
		}
	}
}

// Needs and Slow skip in short mode only: in full mode the test goes on
// (and fails, where what it needs is missing).
func TestTiers(t *testing.T) {
	for name, skip := range map[string]func(testing.TB){
		"needs": func(t testing.TB) { Needs(t, "redis") },
		"slow":  Slow,
	} {
		t.Run(name, func(t *testing.T) {
			ran := false
			t.Run("inner", func(t *testing.T) {
				skip(t)
				ran = true
			})
			if ran == testing.Short() {
				t.Errorf("short mode %v: the test went on = %v", testing.Short(), ran)
			}
		})
	}
}
