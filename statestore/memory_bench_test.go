package statestore_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// BenchmarkMemoryAppend appends to one session of the memory store an event
// of about 500 bytes and a changed tool call at a time, with serve's
// default retention (100,000 events), so it also measures trimming.
func BenchmarkMemoryAppend(b *testing.B) {
	ctx := context.Background()
	s := statestore.NewMemory(statestore.Options{MaxEvents: 100000})
	if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("x", 500)
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		ev := []*acpv2.SessionEvent{storetest.Event(seq, text)}
		calls := []*acpv2.ToolCall{{ToolCallId: fmt.Sprint("call", seq%8), Title: "run tests", Status: "in_progress"}}
		if err := s.Append(ctx, "a", storetest.Encode(b, ev...), storetest.Calls(b, calls...)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemoryRetained reports the heap one stored event keeps in the
// memory store (a typical tool-call update with a diff and _meta), which
// makes up most of an idle session's memory.
func BenchmarkMemoryRetained(b *testing.B) {
	ctx := context.Background()
	u, err := acpjson.DecodeUpdate([]byte(retainedEvent), acpjson.V2)
	if err != nil {
		b.Fatal(err)
	}
	ev := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: u.GetToolCallUpdate()}}
	// Marshal once first: the first marshal of a message type sets up what
	// protobuf keeps for it, about 80 bytes per event of the first loop.
	if _, err := proto.Marshal(ev); err != nil {
		b.Fatal(err)
	}
	const n = 2000
	for b.Loop() {
		s := statestore.NewMemory(statestore.Options{})
		if err := s.CreateSession(ctx, &statestore.Session{ID: "a"}); err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for seq := uint64(1); seq <= n; seq++ {
			// Each event decoded anew, as the session hands them over.
			e := proto.Clone(ev).(*acpv2.SessionEvent)
			e.Seq = seq
			if err := s.Append(ctx, "a", storetest.Encode(b, e), nil); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/event")
		runtime.KeepAlive(s)
	}
}

// retainedEvent is a typical tool-call update as an agent sends it: a
// status change with a diff, a location, raw output and _meta.
const retainedEvent = `{"sessionUpdate":"tool_call_update","toolCallId":"call_042","status":"completed",` +
	`"content":[{"type":"diff","path":"/home/user/project/src/config.json","oldText":"{\n  \"debug\": false\n}","newText":"{\n  \"debug\": true\n}"},` +
	`{"type":"content","content":{"type":"text","text":"Updated configuration: debug mode is now enabled for local runs."}}],` +
	`"locations":[{"path":"/home/user/project/src/config.json","line":2}],"rawOutput":{"ok":true,"bytes":27},` +
	`"_meta":{"trace":{"n":42,"t":"1712345678901234567"}}}`
