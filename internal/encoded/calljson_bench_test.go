package encoded_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// benchSample is code-like text with characters JSON escapes, as the
// bench's agent sends (internal/bench/workload.go).
const benchSample = "\tif err := run(ctx, cfg); err != nil {\n\t\treturn fmt.Errorf(\"step %d: %w\", i, err)\n\t}\n" +
	"// Package config loads the settings.\nfunc Load(path string) (*Config, error) {\n\tb, err := os.ReadFile(path)\n"

func benchText(n int) string { return strings.Repeat(benchSample, n/len(benchSample)+1)[:n] }

// benchLife returns the updates of one tool call's life as the bench's
// agent plays it (payload 256): created with rawInput and a location, in
// progress, four chunks of output, completed with a diff; each update but
// the chunks with its own _meta, as the bench stamps them.
func benchLife(b *testing.B, id string) []*acpv2.SessionUpdate {
	path := "/home/dev/project/internal/config/" + id + ".go"
	meta := func(n int) *acpv2.StructPatch {
		s, err := structpb.NewStruct(map[string]any{"bench": map[string]any{"n": n, "t": fmt.Sprint(1767225600123456789 + n)}})
		if err != nil {
			b.Fatal(err)
		}
		return metaVal(s)
	}
	raw, err := structpb.NewValue(map[string]any{"file_path": path, "old_string": benchText(128), "new_string": benchText(128)})
	if err != nil {
		b.Fatal(err)
	}
	out, err := structpb.NewValue(map[string]any{"ok": true, "linesChanged": 12})
	if err != nil {
		b.Fatal(err)
	}
	upd := func(u *acpv2.ToolCallUpdate) *acpv2.SessionUpdate {
		return &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: u}}
	}
	life := []*acpv2.SessionUpdate{
		upd(&acpv2.ToolCallUpdate{ToolCallId: id, Title: strVal("Edit internal/config/" + id + ".go"), Kind: strVal("edit"),
			Status: strVal("pending"), Locations: locVal(loc(path, 42)), RawInput: valueVal(raw), Meta: meta(1)}),
		upd(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("in_progress"), Meta: meta(2)}),
	}
	for range 4 {
		life = append(life, &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallContentChunk{
			ToolCallContentChunk: &acpv2.ToolCallContentChunk{ToolCallId: id, Content: textItem(benchText(256))}}})
	}
	diff := &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{
		Path: &path, OldText: ptr(benchText(1024)), NewText: ptr(benchText(1024))}}}
	return append(life, upd(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("completed"),
		Content: contentVal(diff), RawOutput: valueVal(out), Meta: meta(10)}))
}

func ptr[T any](v T) *T { return &v }

// BenchmarkMergedCallJSON is the JSON of a tool call's merged events over
// its life (benchLife: seven versions, the last with a 1 KiB diff a side),
// each event's made as a Connect JSON stream first asks for it, and
// appended to the stream's frame. The
// events are made as the session makes them (merged, encoded by
// Calls.Body, numbered) outside the timed part, a batch of lives at a
// time. One op is one call's life; JSON-B/op is its events' JSON.
func BenchmarkMergedCallJSON(b *testing.B) {
	const batch = 64
	lives := make([][]*acpv2.SessionUpdate, batch)
	for i := range lives {
		lives[i] = benchLife(b, fmt.Sprint("call_", i))
	}
	calls := &encoded.Calls{}
	var seq uint64
	events := make([]*encoded.Event, 0, batch*len(lives[0]))
	b.ReportAllocs()
	b.ResetTimer()
	bytes := 0
	var frame []byte // a stream's, which the JSON codec appends to
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		events = events[:0]
		for _, life := range lives[:min(batch, b.N-done)] {
			s := merge.New()
			for _, u := range life {
				var tc *acpv2.ToolCall
				var err error
				if c := u.GetToolCallContentChunk(); c != nil {
					tc, err = s.ApplyChunk(c)
				} else {
					tc, err = s.ApplyUpdate(u.GetToolCallUpdate())
				}
				if err != nil {
					b.Fatal(err)
				}
				seq++
				ev := &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_ToolCall{ToolCall: tc}}
				evs, _, err := encoded.Numbered([]*acpv2.SessionEvent{ev}, []encoded.Body{calls.Body(tc, nil)})
				if err != nil {
					b.Fatal(err)
				}
				events = append(events, evs[0])
			}
			calls.Forget(life[0].GetToolCallUpdate().GetToolCallId())
		}
		b.StartTimer()
		for _, ev := range events {
			var err error
			if frame, err = ev.AppendJSON(frame[:0]); err != nil {
				b.Fatal(err)
			}
			bytes += len(frame)
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "JSON-B/op")
}
