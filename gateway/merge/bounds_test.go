package merge_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
)

// applyAndWire applies each op to s and records the merged call's
// encoding, as a session does.
func applyAndWire(t *testing.T, s *merge.State, ops ...op) {
	t.Helper()
	for _, o := range ops {
		var tc *acpv2.ToolCall
		var err error
		if o.u != nil {
			tc, err = s.ApplyUpdate(o.u)
		} else {
			tc, err = s.ApplyChunk(o.c)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(tc)
		if err != nil {
			t.Fatal(err)
		}
		s.Encoded(tc, b)
	}
}

// snapshotSize is the size of the calls as a SessionSnapshot's
// tool_calls field.
func snapshotSize(calls []*acpv2.ToolCall) int {
	return proto.Size(&acpv2.SessionSnapshot{ToolCalls: calls})
}

// Bytes is the size of the calls in a snapshot, through updates, chunks,
// compaction, trimming and restoring.
func TestBytesIsTheSnapshotsSize(t *testing.T) {
	t.Parallel()
	s := merge.New()
	check := func(when string) {
		t.Helper()
		if got, want := s.Bytes(), snapshotSize(s.Snapshot()); got != want {
			t.Fatalf("%s: Bytes %d, snapshot %d", when, got, want)
		}
	}
	check("empty")
	applyAndWire(t, s,
		upd(&acpv2.ToolCallUpdate{ToolCallId: "a", Title: strVal("read"), Status: strVal("completed"), RawInput: valueVal(mustValue(map[string]any{"p": strings.Repeat("x", 300)}))}),
		upd(&acpv2.ToolCallUpdate{ToolCallId: "b", Status: strVal("in_progress")}),
		chkText("b", strings.Repeat("y", 200)), chkText("b", "more"),
		upd(&acpv2.ToolCallUpdate{ToolCallId: "a", Content: contentVal(textItem("out"))}),
	)
	check("after updates and chunks")
	s.Compact()
	check("compacted")
	thin := s.ThinOldest(0, "", merge.Finished)
	if len(thin) != 1 || thin[0].GetToolCallId() != "a" || !merge.IsThin(thin[0]) {
		t.Fatalf("ThinOldest trimmed %v, want call a (b is running)", thin)
	}
	check("trimmed")
	applyAndWire(t, s, chkText("b", "again"))
	check("a chunk after trimming")
	r := merge.Restore(s.Snapshot())
	if got, want := r.Bytes(), snapshotSize(r.Snapshot()); got != want {
		t.Fatalf("restored: Bytes %d, snapshot %d", got, want)
	}
	if again := r.ThinOldest(0, "", merge.Finished); len(again) != 0 {
		t.Fatalf("a restored trimmed call was trimmed again: %v", again)
	}
}

// ThinOldest trims the oldest finished calls first, never the one kept
// nor a running one, and stops once Bytes is at the target.
func TestThinOldest(t *testing.T) {
	t.Parallel()
	s := merge.New()
	big := valueVal(mustValue(strings.Repeat("z", 1000)))
	for i, status := range []string{"completed", "in_progress", "failed", "completed", "completed"} {
		applyAndWire(t, s, upd(&acpv2.ToolCallUpdate{ToolCallId: fmt.Sprint("c", i), Status: strVal(status), RawOutput: big}))
	}
	before := s.Bytes()
	thin := s.ThinOldest(before-1500, "c0", merge.Finished)
	var ids []string
	for _, tc := range thin {
		ids = append(ids, tc.GetToolCallId())
	}
	if strings.Join(ids, " ") != "c2 c3" {
		t.Fatalf("trimmed %v, want c2 and c3: c0 is kept, c1 runs, and two are enough", ids)
	}
	if s.Bytes() > before-1500 {
		t.Fatalf("Bytes %d after trimming to %d", s.Bytes(), before-1500)
	}
	for _, tc := range s.Snapshot() {
		if trimmed := tc.GetRawOutput() == nil; trimmed != (tc.GetToolCallId() == "c2" || tc.GetToolCallId() == "c3") || trimmed != merge.IsThin(tc) {
			t.Fatalf("after trimming: %v", tc)
		}
	}
}

// A trimmed call keeps what identifies it, within a bound in either
// encoding, and says it is trimmed.
func TestThinCall(t *testing.T) {
	t.Parallel()
	tc := &acpv2.ToolCall{
		ToolCallId: strings.Repeat("i", 256),
		Title:      strings.Repeat("\x01\"é", 200), // control characters, quotes, two-byte characters
		Kind:       strings.Repeat("k", 100),
		Status:     "completed",
		Content:    []*acpv2.ToolCallContent{textItem("gone")},
		RawInput:   mustValue(map[string]any{"gone": true}),
		Meta:       mustStruct(map[string]any{"agent": "meta"}),
		Extra:      mustStruct(map[string]any{"gone": 1}),
	}
	thin := merge.ThinCall(tc)
	if thin.GetToolCallId() != tc.GetToolCallId() || thin.GetStatus() != "completed" || len(thin.GetTitle()) > 256 || len(thin.GetKind()) != 64 ||
		thin.GetContent() != nil || thin.GetRawInput() != nil || thin.GetExtra() != nil || !merge.IsThin(thin) || merge.IsThin(tc) {
		t.Fatalf("ThinCall = %v", thin)
	}
	if !strings.HasPrefix(strings.ReplaceAll(tc.GetTitle(), "\x01", " "), thin.GetTitle()) || len(thin.GetTitle()) < 254 {
		t.Fatalf("title %q, want the original's start without control characters", thin.GetTitle())
	}
	// The largest trimmed call, every character of its strings one JSON
	// escapes (an id holds no control characters): 10,000 of them, a
	// session at the default caps, take 6.6 MiB as protobuf and 13.1 MiB
	// as JSON, in the 16 MiB of a default response.
	quotes := strings.Repeat(`"`, 1000)
	worst := merge.ThinCall(&acpv2.ToolCall{ToolCallId: quotes[:256], Title: quotes, Kind: quotes, Status: quotes})
	js, err := eventjson.Marshal(worst)
	if err != nil {
		t.Fatal(err)
	}
	if n := proto.Size(worst); n > 700 || len(js) > 1400 {
		t.Fatalf("a trimmed call takes %d bytes, %d as JSON", n, len(js))
	}
}

// Fit returns the calls themselves when they fit, and otherwise trims
// the oldest, finished ones first, until they do.
func TestFit(t *testing.T) {
	t.Parallel()
	var calls []*acpv2.ToolCall
	for i, status := range []string{"in_progress", "completed", "completed", "pending"} {
		calls = append(calls, &acpv2.ToolCall{ToolCallId: fmt.Sprint("c", i), Status: status, RawOutput: mustValue(strings.Repeat("o", 1000))})
	}
	size := func(tc *acpv2.ToolCall) int { return proto.Size(tc) }
	total := 0
	for _, c := range calls {
		total += size(c)
	}
	if out, n := merge.Fit(calls, total, 0, size); n != 0 || &out[0] != &calls[0] {
		t.Fatalf("calls that fit were trimmed (%d) or copied", n)
	}
	out, n := merge.Fit(calls, total-1500, 0, size)
	if n != 2 || !merge.IsThin(out[1]) || !merge.IsThin(out[2]) || merge.IsThin(out[0]) || merge.IsThin(calls[1]) {
		t.Fatalf("Fit trimmed %d: %v", n, out)
	}
	out, n = merge.Fit(calls, 100, 0, size)
	if n != 4 {
		t.Fatalf("Fit to nothing trimmed %d of 4: %v", n, out)
	}
}
