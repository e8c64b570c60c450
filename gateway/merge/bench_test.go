package merge_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// BenchmarkApplyUpdate patches the status of an existing tool call whose
// content has two items.
func BenchmarkApplyUpdate(b *testing.B) {
	s := merge.New()
	if _, err := s.ApplyUpdate(&acpv2.ToolCallUpdate{
		ToolCallId: "call_1",
		Title:      strVal("Read file"),
		Kind:       strVal("read"),
		Status:     strVal("pending"),
		Content:    contentVal(textItem("a"), diffItem("/f", "old", "new")),
		Locations:  locVal(loc("/f", 1)),
		RawInput:   valueVal(mustValue(map[string]any{"path": "/f"})),
	}); err != nil {
		b.Fatal(err)
	}
	updates := [2]*acpv2.ToolCallUpdate{
		{ToolCallId: "call_1", Status: strVal("in_progress")},
		{ToolCallId: "call_1", Status: strVal("completed")},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.ApplyUpdate(updates[i&1]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkApplyChunk appends text chunks to an existing tool call. Every
// 1,000 chunks an update replaces the content (as a tool call's final update
// typically does), so the content does not grow without bound.
func BenchmarkApplyChunk(b *testing.B) {
	s := merge.New()
	if _, err := s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: "call_1", Title: strVal("Run"), Kind: strVal("execute")}); err != nil {
		b.Fatal(err)
	}
	c := chunk("call_1", textItem("output line\n"))
	reset := &acpv2.ToolCallUpdate{ToolCallId: "call_1", Content: contentClear()}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.ApplyChunk(c); err != nil {
			b.Fatal(err)
		}
		if i++; i%1000 == 0 {
			if _, err := s.ApplyUpdate(reset); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// turnOps is a 1,000-op turn: 100 tool calls, each created, then patched and
// chunked (10 ops per tool call).
func turnOps() []op {
	ops := make([]op, 0, 1000)
	for i := range 100 {
		id := fmt.Sprintf("call_%03d", i)
		ops = append(ops,
			upd(&acpv2.ToolCallUpdate{
				ToolCallId: id,
				Title:      strVal("Run " + id),
				Kind:       strVal("execute"),
				Status:     strVal("pending"),
				RawInput:   valueVal(mustValue(map[string]any{"command": "ls"})),
			}),
			upd(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("in_progress"), Locations: locVal(loc("/src", 1))}),
			chkText(id, "1"), chkText(id, "2"), chkText(id, "3"), chkText(id, "4"),
			chkText(id, "5"), chkText(id, "6"), chkText(id, "7"),
			upd(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("completed"), RawOutput: valueVal(mustValue("ok"))}),
		)
	}
	return ops
}

// BenchmarkTurn1000 applies a 1,000-op turn to a fresh State per iteration.
func BenchmarkTurn1000(b *testing.B) {
	ops := turnOps()
	b.ReportAllocs()
	for b.Loop() {
		s := merge.New()
		for _, o := range ops {
			if _, err := apply(s, o); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ops)), "ns/apply")
}

// BenchmarkWireLife encodes each version of one tool call's life as the
// gateway's events carry it: created with rawInput and a location, set
// running, four output chunks, completed with a diff and rawOutput. One
// op is the whole life (seven encodings), marshalled whole (plain), or by
// encoded.Calls from the parts each version shares with the one before
// (wire), as a session encodes them, or not encoded (none: the part of the
// others' time that is not encoding).
func BenchmarkWireLife(b *testing.B) {
	text := func(n int) string { return strings.Repeat("x := f(y)\n", n/10) }
	life := func(s *merge.State, id string, encode func(*acpv2.ToolCall) ([]byte, error)) {
		step := func(tc *acpv2.ToolCall, err error) {
			if err == nil {
				_, err = encode(tc)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		step(s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: id, Title: strVal("Edit config.go"), Kind: strVal("edit"), Status: strVal("pending"),
			Locations: locVal(loc("/home/dev/project/config.go", 42)),
			RawInput:  valueVal(mustValue(map[string]any{"file_path": "/home/dev/project/config.go", "old_string": text(128), "new_string": text(128)}))}))
		step(s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("in_progress")}))
		for range 4 {
			step(s.ApplyChunk(&acpv2.ToolCallContentChunk{ToolCallId: id, Content: textItem(text(256))}))
		}
		step(s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: id, Status: strVal("completed"),
			Content:   contentVal(diffItem("/home/dev/project/config.go", text(1024), text(1024))),
			RawOutput: valueVal(mustValue(map[string]any{"ok": true, "linesChanged": 12}))}))
	}
	for _, c := range []struct {
		name   string
		encode func(*encoded.Calls) func(*acpv2.ToolCall) ([]byte, error)
	}{
		{"plain", func(*encoded.Calls) func(*acpv2.ToolCall) ([]byte, error) {
			return func(tc *acpv2.ToolCall) ([]byte, error) { return proto.Marshal(tc) }
		}},
		{"wire", func(c *encoded.Calls) func(*acpv2.ToolCall) ([]byte, error) {
			return func(tc *acpv2.ToolCall) ([]byte, error) { return c.Body(tc, nil).Bytes(), nil }
		}},
		{"none", func(*encoded.Calls) func(*acpv2.ToolCall) ([]byte, error) {
			return func(*acpv2.ToolCall) ([]byte, error) { return nil, nil }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, calls := merge.New(), &encoded.Calls{}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				life(s, fmt.Sprint("call_", i%100), c.encode(calls))
				i++
				if i%100 == 0 {
					s.Compact()
					calls.Reset()
				}
			}
		})
	}
}
