package statestore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
		if err := s.Append(ctx, "a", ev, calls); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
}
