package merge_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Rule 1: an unseen id creates an empty tool call, a seen id patches it, and
// no defaults are filled in.
func TestCreateAndPatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  []op
		want *acpv2.ToolCall
	}{
		{
			name: "bare id creates an empty tool call",
			ops:  []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1"})},
			want: &acpv2.ToolCall{ToolCallId: "c1"},
		},
		{
			name: "kind and status stay empty when never set",
			ops:  []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strVal("Read file")})},
			want: &acpv2.ToolCall{ToolCallId: "c1", Title: "Read file"},
		},
		{
			name: "seen id is patched, other fields kept",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strVal("Read"), Kind: strVal("read"), Status: strVal("pending")}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Status: strVal("in_progress")}),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1", Title: "Read", Kind: "read", Status: "in_progress"},
		},
		{
			name: "bare update of a seen id changes nothing",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strVal("Read"), Content: contentVal(textItem("x"))}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1"}),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1", Title: "Read", Content: []*acpv2.ToolCallContent{textItem("x")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			got := mustApply(t, s, tt.ops...)
			if !proto.Equal(got, tt.want) {
				t.Errorf("result:%s", diff(tt.want, got))
			}
			if stored := s.Get("c1"); !proto.Equal(stored, tt.want) {
				t.Errorf("Get:%s", diff(tt.want, stored))
			}
			if s.Len() != 1 {
				t.Errorf("Len = %d, want 1", s.Len())
			}
		})
	}
}

// full is a tool call with every field set; rule-2 tests patch one field of it.
func fullUpdate(id string) *acpv2.ToolCallUpdate {
	return &acpv2.ToolCallUpdate{
		ToolCallId: id,
		Title:      strVal("title"),
		Kind:       strVal("edit"),
		Status:     strVal("pending"),
		Content:    contentVal(textItem("a"), diffItem("/f", "old", "new")),
		Locations:  locVal(loc("/f", 3)),
		RawInput:   valueVal(mustValue(map[string]any{"path": "/f"})),
		RawOutput:  valueVal(mustValue("out")),
		Meta:       metaVal(mustStruct(map[string]any{"trace": "t1"})),
		Extra:      mustStruct(map[string]any{"x": 1.0}),
	}
}

// Rule 2: nil wrapper = unchanged, clear = cleared, value = replaced.
func TestPatchFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field    string
		clear    func(u *acpv2.ToolCallUpdate)
		value    func(u *acpv2.ToolCallUpdate)
		cleared  func(tc *acpv2.ToolCall)
		replaced func(tc *acpv2.ToolCall)
	}{
		{
			field:    "title",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Title = strClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Title = strVal("new title") },
			cleared:  func(tc *acpv2.ToolCall) { tc.Title = "" },
			replaced: func(tc *acpv2.ToolCall) { tc.Title = "new title" },
		},
		{
			field:    "kind",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Kind = strClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Kind = strVal("execute") },
			cleared:  func(tc *acpv2.ToolCall) { tc.Kind = "" },
			replaced: func(tc *acpv2.ToolCall) { tc.Kind = "execute" },
		},
		{
			field:    "status",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Status = strClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Status = strVal("completed") },
			cleared:  func(tc *acpv2.ToolCall) { tc.Status = "" },
			replaced: func(tc *acpv2.ToolCall) { tc.Status = "completed" },
		},
		{
			field:    "content",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Content = contentClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Content = contentVal(terminalItem("term")) },
			cleared:  func(tc *acpv2.ToolCall) { tc.Content = nil },
			replaced: func(tc *acpv2.ToolCall) { tc.Content = []*acpv2.ToolCallContent{terminalItem("term")} },
		},
		{
			field:    "locations",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Locations = locClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Locations = locVal(loc("/g", 1), loc("/h", 2)) },
			cleared:  func(tc *acpv2.ToolCall) { tc.Locations = nil },
			replaced: func(tc *acpv2.ToolCall) { tc.Locations = []*acpv2.ToolCallLocation{loc("/g", 1), loc("/h", 2)} },
		},
		{
			field:    "raw_input",
			clear:    func(u *acpv2.ToolCallUpdate) { u.RawInput = valueClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.RawInput = valueVal(mustValue([]any{1.0, "two"})) },
			cleared:  func(tc *acpv2.ToolCall) { tc.RawInput = nil },
			replaced: func(tc *acpv2.ToolCall) { tc.RawInput = mustValue([]any{1.0, "two"}) },
		},
		{
			field:    "raw_output",
			clear:    func(u *acpv2.ToolCallUpdate) { u.RawOutput = valueClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.RawOutput = valueVal(mustValue(map[string]any{"ok": true})) },
			cleared:  func(tc *acpv2.ToolCall) { tc.RawOutput = nil },
			replaced: func(tc *acpv2.ToolCall) { tc.RawOutput = mustValue(map[string]any{"ok": true}) },
		},
		{
			field:    "meta",
			clear:    func(u *acpv2.ToolCallUpdate) { u.Meta = metaClear() },
			value:    func(u *acpv2.ToolCallUpdate) { u.Meta = metaVal(mustStruct(map[string]any{"other": "o"})) },
			cleared:  func(tc *acpv2.ToolCall) { tc.Meta = nil },
			replaced: func(tc *acpv2.ToolCall) { tc.Meta = mustStruct(map[string]any{"other": "o"}) },
		},
	}
	for _, tt := range tests {
		cases := []struct {
			name   string
			patch  func(u *acpv2.ToolCallUpdate)
			expect func(tc *acpv2.ToolCall)
		}{
			{"omitted", func(*acpv2.ToolCallUpdate) {}, func(*acpv2.ToolCall) {}},
			{"empty wrapper", emptyWrapper(tt.field), func(*acpv2.ToolCall) {}},
			{"clear", tt.clear, tt.cleared},
			{"value", tt.value, tt.replaced},
		}
		for _, c := range cases {
			t.Run(tt.field+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				s := merge.New()
				base := mustApply(t, s, upd(fullUpdate("c1")))
				want := proto.Clone(base).(*acpv2.ToolCall)
				c.expect(want)

				u := &acpv2.ToolCallUpdate{ToolCallId: "c1"}
				c.patch(u)
				got, err := s.ApplyUpdate(u)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Errorf("result:%s", diff(want, got))
				}
				if !proto.Equal(s.Get("c1"), want) {
					t.Errorf("stored:%s", diff(want, s.Get("c1")))
				}
			})
		}
	}
}

// emptyWrapper sets field to a wrapper with neither case set, which must
// behave like an omitted field.
func emptyWrapper(field string) func(u *acpv2.ToolCallUpdate) {
	return func(u *acpv2.ToolCallUpdate) {
		switch field {
		case "title":
			u.Title = &acpv2.StringPatch{}
		case "kind":
			u.Kind = &acpv2.StringPatch{}
		case "status":
			u.Status = &acpv2.StringPatch{}
		case "content":
			u.Content = &acpv2.ToolCallContentPatch{}
		case "locations":
			u.Locations = &acpv2.ToolCallLocationPatch{}
		case "raw_input":
			u.RawInput = &acpv2.ValuePatch{}
		case "raw_output":
			u.RawOutput = &acpv2.ValuePatch{}
		case "meta":
			u.Meta = &acpv2.StructPatch{}
		default:
			panic("unknown field " + field)
		}
	}
}

// Rule 3: content and locations are replaced as whole lists, and an empty
// value list clears like clear does.
func TestListsReplacedWhole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		second        *acpv2.ToolCallUpdate
		wantContent   []*acpv2.ToolCallContent
		wantLocations []*acpv2.ToolCallLocation
	}{
		{
			name:          "value replaces, never appends",
			second:        &acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(textItem("c")), Locations: locVal(loc("/z", 9))},
			wantContent:   []*acpv2.ToolCallContent{textItem("c")},
			wantLocations: []*acpv2.ToolCallLocation{loc("/z", 9)},
		},
		{
			name:   "empty value clears",
			second: &acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(), Locations: locVal()},
		},
		{
			name: "empty non-nil value clears",
			second: &acpv2.ToolCallUpdate{
				ToolCallId: "c1",
				Content:    contentVal([]*acpv2.ToolCallContent{}...),
				Locations:  locVal([]*acpv2.ToolCallLocation{}...),
			},
		},
		{
			name:   "clear clears",
			second: &acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentClear(), Locations: locClear()},
		},
		{
			name: "value with nil list clears",
			second: &acpv2.ToolCallUpdate{
				ToolCallId: "c1",
				Content:    &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{}},
				Locations:  &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, upd(&acpv2.ToolCallUpdate{
				ToolCallId: "c1",
				Content:    contentVal(textItem("a"), textItem("b")),
				Locations:  locVal(loc("/x", 1), loc("/y", 2)),
			}))
			got := mustApply(t, s, upd(tt.second))
			if !equalSlices(got.Content, tt.wantContent) {
				t.Errorf("content = %v, want %v", got.Content, tt.wantContent)
			}
			if !equalSlices(got.Locations, tt.wantLocations) {
				t.Errorf("locations = %v, want %v", got.Locations, tt.wantLocations)
			}
			// A cleared list is nil, not merely empty.
			if tt.wantContent == nil && got.Content != nil {
				t.Errorf("content = %#v, want nil", got.Content)
			}
			if tt.wantLocations == nil && got.Locations != nil {
				t.Errorf("locations = %#v, want nil", got.Locations)
			}
		})
	}
}

// Rule 4: chunks append one item; a content update replaces what chunks
// built; later chunks append to the replacement; a chunk creates an unseen id.
func TestChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ops       []op
		wantOrder []string
		want      map[string][]*acpv2.ToolCallContent
	}{
		{
			name:      "chunks append one item each",
			ops:       []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1"}), chkText("c1", "a"), chkText("c1", "b"), chkText("c1", "c")},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {textItem("a"), textItem("b"), textItem("c")}},
		},
		{
			name: "chunks append after update content",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(textItem("u1"), textItem("u2"))}),
				chkText("c1", "a"),
			},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {textItem("u1"), textItem("u2"), textItem("a")}},
		},
		{
			name: "content value replaces chunks, later chunks append to it",
			ops: []op{
				chkText("c1", "a"), chkText("c1", "b"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(diffItem("/f", "", "x"))}),
				chkText("c1", "c"),
			},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {diffItem("/f", "", "x"), textItem("c")}},
		},
		{
			name: "content clear drops chunks, later chunks start afresh",
			ops: []op{
				chkText("c1", "a"), chkText("c1", "b"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentClear()}),
				chkText("c1", "c"), chkText("c1", "d"),
			},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {textItem("c"), textItem("d")}},
		},
		{
			name: "update without content keeps chunks",
			ops: []op{
				chkText("c1", "a"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Status: strVal("completed")}),
				chkText("c1", "b"),
			},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {textItem("a"), textItem("b")}},
		},
		{
			name: "chunk for unseen id creates it in first-seen order",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1"}),
				chkText("c2", "x"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c3"}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c2", Title: strVal("t")}),
			},
			wantOrder: []string{"c1", "c2", "c3"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": nil, "c2": {textItem("x")}, "c3": nil},
		},
		{
			name: "chunk meta and extra are not merged",
			ops: []op{chk(&acpv2.ToolCallContentChunk{
				ToolCallId: "c1",
				Content:    textItem("a"),
				Meta:       mustStruct(map[string]any{"m": 1.0}),
				Extra:      mustStruct(map[string]any{"e": 1.0}),
			})},
			wantOrder: []string{"c1"},
			want:      map[string][]*acpv2.ToolCallContent{"c1": {textItem("a")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, tt.ops...)
			snap := s.Snapshot()
			if len(snap) != len(tt.wantOrder) {
				t.Fatalf("Snapshot has %d calls, want %d", len(snap), len(tt.wantOrder))
			}
			for i, id := range tt.wantOrder {
				if snap[i].GetToolCallId() != id {
					t.Errorf("Snapshot[%d] = %q, want %q", i, snap[i].GetToolCallId(), id)
				}
				if !equalSlices(snap[i].GetContent(), tt.want[id]) {
					t.Errorf("%s content = %v, want %v", id, snap[i].GetContent(), tt.want[id])
				}
				if snap[i].GetMeta() != nil || snap[i].GetExtra() != nil {
					t.Errorf("%s: chunk meta/extra leaked: %v", id, snap[i])
				}
			}
		})
	}
}

// Rule 5: kind and status are verbatim, unknown content items are kept, meta
// replaces whole and clear clears it.
func TestVerbatim(t *testing.T) {
	t.Parallel()
	unknown := unknownItem(map[string]any{"type": "hologram", "frames": []any{1.0, 2.0}})
	tests := []struct {
		name string
		ops  []op
		want *acpv2.ToolCall
	}{
		{
			name: "custom kind and status",
			ops:  []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Kind: strVal("_my_kind"), Status: strVal("_my_status")})},
			want: &acpv2.ToolCall{ToolCallId: "c1", Kind: "_my_kind", Status: "_my_status"},
		},
		{
			name: "unknown kind and status",
			ops:  []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Kind: strVal("teleport"), Status: strVal("paused")})},
			want: &acpv2.ToolCall{ToolCallId: "c1", Kind: "teleport", Status: "paused"},
		},
		{
			name: "unknown content item in update and chunk",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(unknown)}),
				chk(chunk("c1", unknown)),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1", Content: []*acpv2.ToolCallContent{unknown, unknown}},
		},
		{
			name: "meta value replaces whole",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaVal(mustStruct(map[string]any{"a": 1.0, "b": 2.0}))}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaVal(mustStruct(map[string]any{"c": 3.0}))}),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1", Meta: mustStruct(map[string]any{"c": 3.0})},
		},
		{
			name: "meta empty value is kept as an empty object",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaVal(mustStruct(map[string]any{"a": 1.0}))}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaVal(&structpb.Struct{})}),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1", Meta: &structpb.Struct{}},
		},
		{
			name: "meta clear clears",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaVal(mustStruct(map[string]any{"a": 1.0}))}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Meta: metaClear()}),
			},
			want: &acpv2.ToolCall{ToolCallId: "c1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			got := mustApply(t, s, tt.ops...)
			if !proto.Equal(got, tt.want) {
				t.Errorf("result:%s", diff(tt.want, got))
			}
		})
	}
}

// Rule 6: extra merges key by key; null deletes; empty becomes nil.
func TestExtraMerge(t *testing.T) {
	t.Parallel()
	null := structpb.NewNullValue()
	tests := []struct {
		name   string
		stored *structpb.Struct // extra of the creating update; nil = none
		patch  *structpb.Struct
		want   *structpb.Struct
	}{
		{
			name:   "nil patch keeps stored",
			stored: mustStruct(map[string]any{"a": 1.0}),
			want:   mustStruct(map[string]any{"a": 1.0}),
		},
		{
			name:   "empty patch keeps stored",
			stored: mustStruct(map[string]any{"a": 1.0}),
			patch:  &structpb.Struct{},
			want:   mustStruct(map[string]any{"a": 1.0}),
		},
		{
			name:   "new key is added",
			stored: mustStruct(map[string]any{"a": 1.0}),
			patch:  mustStruct(map[string]any{"b": "two"}),
			want:   mustStruct(map[string]any{"a": 1.0, "b": "two"}),
		},
		{
			name:   "existing key is replaced whole",
			stored: mustStruct(map[string]any{"a": map[string]any{"x": 1.0, "y": 2.0}, "b": true}),
			patch:  mustStruct(map[string]any{"a": map[string]any{"z": 3.0}}),
			want:   mustStruct(map[string]any{"a": map[string]any{"z": 3.0}, "b": true}),
		},
		{
			name:   "null deletes a key",
			stored: mustStruct(map[string]any{"a": 1.0, "b": 2.0}),
			patch:  &structpb.Struct{Fields: map[string]*structpb.Value{"a": null}},
			want:   mustStruct(map[string]any{"b": 2.0}),
		},
		{
			name:   "null of an absent key is a no-op",
			stored: mustStruct(map[string]any{"a": 1.0}),
			patch:  &structpb.Struct{Fields: map[string]*structpb.Value{"zz": null}},
			want:   mustStruct(map[string]any{"a": 1.0}),
		},
		{
			name:   "deleting the last key leaves nil",
			stored: mustStruct(map[string]any{"a": 1.0}),
			patch:  &structpb.Struct{Fields: map[string]*structpb.Value{"a": null}},
			want:   nil,
		},
		{
			name:  "nulls on an empty extra leave nil",
			patch: &structpb.Struct{Fields: map[string]*structpb.Value{"a": null, "b": {}}},
			want:  nil,
		},
		{
			name:  "mixed set and delete on an empty extra",
			patch: &structpb.Struct{Fields: map[string]*structpb.Value{"a": null, "b": structpb.NewStringValue("v")}},
			want:  mustStruct(map[string]any{"b": "v"}),
		},
		{
			name:   "nil and kindless values delete like null",
			stored: mustStruct(map[string]any{"a": 1.0, "b": 2.0, "c": 3.0}),
			patch:  &structpb.Struct{Fields: map[string]*structpb.Value{"a": nil, "b": {}}},
			want:   mustStruct(map[string]any{"c": 3.0}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			first := mustApply(t, s, upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Extra: tt.stored}))
			firstClone := proto.Clone(first)
			got := mustApply(t, s, upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Extra: tt.patch}))
			if tt.want == nil {
				if got.Extra != nil {
					t.Errorf("extra = %v, want nil", got.Extra)
				}
			} else if !proto.Equal(got.Extra, tt.want) {
				t.Errorf("extra:%s", diff(tt.want, got.Extra))
			}
			if !proto.Equal(first, firstClone) {
				t.Errorf("merging extra changed the previous version:%s", diff(firstClone, first))
			}
		})
	}
}

// Rule 7: Preview stores nothing and works for unseen ids.
func TestPreview(t *testing.T) {
	t.Parallel()
	setup := []op{
		upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strVal("t"), Extra: mustStruct(map[string]any{"a": 1.0})}),
		chkText("c1", "a"),
		upd(&acpv2.ToolCallUpdate{ToolCallId: "c2", Status: strVal("pending")}),
	}
	tests := []struct {
		name string
		u    *acpv2.ToolCallUpdate
		want *acpv2.ToolCall
	}{
		{
			name: "seen id",
			u:    &acpv2.ToolCallUpdate{ToolCallId: "c1", Status: strVal("completed"), Content: contentVal(textItem("z"))},
			want: &acpv2.ToolCall{ToolCallId: "c1", Title: "t", Status: "completed", Content: []*acpv2.ToolCallContent{textItem("z")}, Extra: mustStruct(map[string]any{"a": 1.0})},
		},
		{
			name: "seen id with extra delete",
			u:    &acpv2.ToolCallUpdate{ToolCallId: "c1", Extra: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNullValue()}}},
			want: &acpv2.ToolCall{ToolCallId: "c1", Title: "t", Content: []*acpv2.ToolCallContent{textItem("a")}},
		},
		{
			name: "unseen id",
			u:    &acpv2.ToolCallUpdate{ToolCallId: "new", Kind: strVal("read")},
			want: &acpv2.ToolCall{ToolCallId: "new", Kind: "read"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, setup...)
			before := s.Snapshot()
			beforeClone := cloneCalls(before)

			got, err := s.Preview(tt.u)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("Preview:%s", diff(tt.want, got))
			}
			after := s.Snapshot()
			if !equalCalls(before, after) || !equalCalls(beforeClone, after) {
				t.Errorf("Preview changed the state:\nbefore: %v\n after: %v", beforeClone, after)
			}
			if s.Len() != 2 {
				t.Errorf("Len = %d, want 2", s.Len())
			}
			if tt.u.ToolCallId == "new" && s.Get("new") != nil {
				t.Errorf("Preview stored an unseen id")
			}
			// Preview matches what ApplyUpdate then does.
			applied := mustApply(t, s, upd(tt.u))
			if !proto.Equal(applied, got) {
				t.Errorf("ApplyUpdate after Preview:%s", diff(got, applied))
			}
		})
	}
}

// Rule 8: Snapshot is in first-seen order.
func TestSnapshotOrder(t *testing.T) {
	t.Parallel()
	u := func(id string) op { return upd(&acpv2.ToolCallUpdate{ToolCallId: id, Title: strVal(id)}) }
	tests := []struct {
		name string
		ops  []op
		want []string
	}{
		{"single", []op{u("a")}, []string{"a"}},
		{"interleaved", []op{u("b"), u("a"), u("b"), chkText("c", "x"), u("a"), chkText("b", "y"), u("d"), u("c")}, []string{"b", "a", "c", "d"}},
		{"not lexical", []op{u("z"), u("y"), u("x"), u("z"), u("x")}, []string{"z", "y", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, tt.ops...)
			var got []string
			for _, tc := range s.Snapshot() {
				got = append(got, tc.ToolCallId)
			}
			if len(got) != len(tt.want) || s.Len() != len(tt.want) {
				t.Fatalf("Snapshot ids = %v (Len %d), want %v", got, s.Len(), tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("Snapshot ids = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func cloneCalls(calls []*acpv2.ToolCall) []*acpv2.ToolCall {
	out := make([]*acpv2.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = proto.Clone(c).(*acpv2.ToolCall)
	}
	return out
}

// Rule 9: nothing returned is ever mutated later, and inputs are not mutated.
func TestImmutability(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  []op
	}{
		{
			name: "chunks after chunks",
			ops:  []op{chkText("c1", "a"), chkText("c1", "b"), chkText("c1", "c"), chkText("c1", "d"), chkText("c1", "e"), chkText("c1", "f")},
		},
		{
			name: "chunks after update content",
			ops: []op{
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(textItem("u1"), textItem("u2"))}),
				chkText("c1", "a"), chkText("c1", "b"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Status: strVal("x")}),
				chkText("c1", "c"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(textItem("u3"))}),
				chkText("c1", "d"), chkText("c1", "e"),
			},
		},
		{
			name: "every field patched repeatedly",
			ops: []op{
				upd(fullUpdate("c1")),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strVal("t2"), Extra: mustStruct(map[string]any{"x": nil, "y": 2.0})}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Locations: locVal(loc("/a", 1)), Extra: mustStruct(map[string]any{"z": 3.0})}),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", RawInput: valueClear(), RawOutput: valueVal(mustValue(1.0)), Meta: metaClear()}),
				chkText("c1", "a"),
				upd(fullUpdate("c1")),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentClear(), Locations: locClear(), Extra: mustStruct(map[string]any{"x": nil})}),
			},
		},
		{
			name: "several ids interleaved",
			ops: []op{
				chkText("a", "1"), upd(fullUpdate("b")), chkText("a", "2"), chkText("b", "3"),
				upd(&acpv2.ToolCallUpdate{ToolCallId: "a", Kind: strVal("read")}), chkText("b", "4"), chkText("a", "5"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			var kept, clones []*acpv2.ToolCall
			var snaps, snapClones [][]*acpv2.ToolCall
			keep := func(tc *acpv2.ToolCall) {
				kept = append(kept, tc)
				clones = append(clones, proto.Clone(tc).(*acpv2.ToolCall))
			}
			for _, o := range tt.ops {
				inClone := proto.Clone(o.message())
				got, err := apply(s, o)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(o.message(), inClone) {
					t.Errorf("apply mutated its input %v", o)
				}
				keep(got)
				pu := &acpv2.ToolCallUpdate{ToolCallId: got.ToolCallId, Status: strVal("preview"), Extra: mustStruct(map[string]any{"p": 1.0})}
				p, err := s.Preview(pu)
				if err != nil {
					t.Fatal(err)
				}
				keep(p)
				snap := s.Snapshot()
				snaps = append(snaps, snap)
				snapClones = append(snapClones, cloneCalls(snap))
			}
			// Keep going: more chunks and updates on every id.
			for _, tc := range s.Snapshot() {
				mustApply(t, s,
					chkText(tc.ToolCallId, "later1"),
					upd(&acpv2.ToolCallUpdate{ToolCallId: tc.ToolCallId, Title: strVal("later"), Extra: mustStruct(map[string]any{"x": nil, "later": true})}),
					chkText(tc.ToolCallId, "later2"),
				)
			}
			for i := range kept {
				if !proto.Equal(kept[i], clones[i]) {
					t.Errorf("result %d was mutated later:%s", i, diff(clones[i], kept[i]))
				}
			}
			for i := range snaps {
				if !equalCalls(snaps[i], snapClones[i]) {
					t.Errorf("snapshot %d was mutated later:\n got: %v\nwant: %v", i, snaps[i], snapClones[i])
				}
			}
		})
	}
}

// Returned content slices are clipped, so even a caller that (wrongly) appends
// to one cannot write into memory a later version uses.
func TestReturnedContentIsClipped(t *testing.T) {
	t.Parallel()
	s := merge.New()
	for _, text := range []string{"a", "b", "c"} {
		got := mustApply(t, s, chkText("c1", text))
		if len(got.Content) != cap(got.Content) {
			t.Fatalf("content len %d, cap %d: not clipped", len(got.Content), cap(got.Content))
		}
	}
	got := mustApply(t, s, upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: &acpv2.ToolCallContentPatch{
		Op: &acpv2.ToolCallContentPatch_Value{Value: &acpv2.ToolCallContentList{Items: append(make([]*acpv2.ToolCallContent, 0, 8), textItem("u"))}},
	}}))
	if len(got.Content) != cap(got.Content) {
		t.Fatalf("content len %d, cap %d: not clipped", len(got.Content), cap(got.Content))
	}
}

// States that share tool calls (Restore of a Snapshot) grow content
// independently.
func TestRestoredStatesDiverge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup []op
	}{
		{"from chunks", []op{chkText("c1", "a"), chkText("c1", "b"), chkText("c1", "c")}},
		{"from update", []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Content: contentVal(textItem("a"))})}},
		{"empty", []op{upd(&acpv2.ToolCallUpdate{ToolCallId: "c1"})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s1 := merge.New()
			mustApply(t, s1, tt.setup...)
			s2 := merge.Restore(s1.Snapshot())
			base := proto.Clone(s1.Get("c1")).(*acpv2.ToolCall)
			got1 := mustApply(t, s1, chkText("c1", "one"))
			got2 := mustApply(t, s2, chkText("c1", "two"))
			want1 := proto.Clone(base).(*acpv2.ToolCall)
			want1.Content = append(want1.Content, textItem("one"))
			want2 := proto.Clone(base).(*acpv2.ToolCall)
			want2.Content = append(want2.Content, textItem("two"))
			if !proto.Equal(got1, want1) || !proto.Equal(s1.Get("c1"), want1) {
				t.Errorf("original:%s", diff(want1, s1.Get("c1")))
			}
			if !proto.Equal(got2, want2) || !proto.Equal(s2.Get("c1"), want2) {
				t.Errorf("restored:%s", diff(want2, s2.Get("c1")))
			}
		})
	}
}

// The State never writes into spare capacity of a list it was given, even when
// a restored tool call's content has room to grow in place.
func TestRestoreDoesNotWriteSpareCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks int
	}{
		{"one chunk", 1},
		{"several chunks", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backing := make([]*acpv2.ToolCallContent, 1, 16)
			backing[0] = textItem("restored")
			restored := &acpv2.ToolCall{ToolCallId: "c1", Content: backing}
			s1 := merge.Restore([]*acpv2.ToolCall{restored})
			s2 := merge.Restore([]*acpv2.ToolCall{restored})
			for i := range tt.chunks {
				got1 := mustApply(t, s1, chkText("c1", fmt.Sprint("one", i)))
				got2 := mustApply(t, s2, chkText("c1", fmt.Sprint("two", i)))
				if len(got1.Content) != i+2 || len(got2.Content) != i+2 {
					t.Fatalf("content lengths %d, %d, want %d", len(got1.Content), len(got2.Content), i+2)
				}
			}
			for i, it := range backing[1:cap(backing)] {
				if it != nil {
					t.Fatalf("spare capacity of the restored content was written at %d: %v", i+1, it)
				}
			}
			want1 := []*acpv2.ToolCallContent{textItem("restored")}
			want2 := []*acpv2.ToolCallContent{textItem("restored")}
			for i := range tt.chunks {
				want1 = append(want1, textItem(fmt.Sprint("one", i)))
				want2 = append(want2, textItem(fmt.Sprint("two", i)))
			}
			if !equalSlices(s1.Get("c1").Content, want1) || !equalSlices(s2.Get("c1").Content, want2) {
				t.Errorf("restored states interfered:\n s1: %v\n s2: %v", s1.Get("c1").Content, s2.Get("c1").Content)
			}
		})
	}
}

func TestRestore(t *testing.T) {
	t.Parallel()
	a := &acpv2.ToolCall{ToolCallId: "a", Title: "A"}
	b := &acpv2.ToolCall{ToolCallId: "b", Title: "B"}
	b2 := &acpv2.ToolCall{ToolCallId: "b", Title: "B2"}
	tests := []struct {
		name  string
		calls []*acpv2.ToolCall
		want  []*acpv2.ToolCall
	}{
		{"nil", nil, nil},
		{"in order", []*acpv2.ToolCall{b, a}, []*acpv2.ToolCall{b, a}},
		{"skips nil and empty ids", []*acpv2.ToolCall{nil, a, {Title: "no id"}, b}, []*acpv2.ToolCall{a, b}},
		{"duplicate: last wins at first position", []*acpv2.ToolCall{b, a, b2}, []*acpv2.ToolCall{b2, a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.Restore(tt.calls)
			if got := s.Snapshot(); !equalCalls(got, tt.want) {
				t.Errorf("Snapshot = %v, want %v", got, tt.want)
			}
			if s.Len() != len(tt.want) {
				t.Errorf("Len = %d, want %d", s.Len(), len(tt.want))
			}
			for _, w := range tt.want {
				if s.Get(w.ToolCallId) != w {
					t.Errorf("Get(%q) is not the restored message", w.ToolCallId)
				}
			}
			// A restored state keeps working.
			got := mustApply(t, s, upd(&acpv2.ToolCallUpdate{ToolCallId: "b", Status: strVal("completed")}))
			if got.Status != "completed" {
				t.Errorf("status = %q after restore+update", got.Status)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		call    func(s *merge.State) (*acpv2.ToolCall, error)
		wantErr error
	}{
		{"update without id", func(s *merge.State) (*acpv2.ToolCall, error) {
			return s.ApplyUpdate(&acpv2.ToolCallUpdate{Title: strVal("t")})
		}, merge.ErrNoToolCallID},
		{"nil update", func(s *merge.State) (*acpv2.ToolCall, error) { return s.ApplyUpdate(nil) }, merge.ErrNoToolCallID},
		{"chunk without id", func(s *merge.State) (*acpv2.ToolCall, error) {
			return s.ApplyChunk(&acpv2.ToolCallContentChunk{Content: textItem("x")})
		}, merge.ErrNoToolCallID},
		{"nil chunk", func(s *merge.State) (*acpv2.ToolCall, error) { return s.ApplyChunk(nil) }, merge.ErrNoToolCallID},
		{"chunk without content, seen id", func(s *merge.State) (*acpv2.ToolCall, error) {
			return s.ApplyChunk(&acpv2.ToolCallContentChunk{ToolCallId: "c1"})
		}, merge.ErrNoContent},
		{"chunk without content, unseen id", func(s *merge.State) (*acpv2.ToolCall, error) {
			return s.ApplyChunk(&acpv2.ToolCallContentChunk{ToolCallId: "new"})
		}, merge.ErrNoContent},
		{"preview without id", func(s *merge.State) (*acpv2.ToolCall, error) {
			return s.Preview(&acpv2.ToolCallUpdate{})
		}, merge.ErrNoToolCallID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, upd(fullUpdate("c1")), chkText("c1", "x"))
			before := cloneCalls(s.Snapshot())
			got, err := tt.call(s)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != nil {
				t.Errorf("result = %v, want nil", got)
			}
			if after := s.Snapshot(); !equalCalls(before, after) {
				t.Errorf("state changed on error:\nbefore: %v\n after: %v", before, after)
			}
			// The state still works after the error.
			if tc := mustApply(t, s, chkText("c1", "y")); len(tc.Content) != 4 {
				t.Errorf("content has %d items after error, want 4", len(tc.Content))
			}
		})
	}
}

func TestZeroLenAndGet(t *testing.T) {
	t.Parallel()
	s := merge.New()
	if s.Len() != 0 || len(s.Snapshot()) != 0 || s.Get("x") != nil || s.Get("") != nil {
		t.Fatalf("new State not empty")
	}
}

// Rule 10 (example form; the property form is in property_test.go): applying
// the same update twice equals applying it once.
func TestIdempotentUpdate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		u    *acpv2.ToolCallUpdate
	}{
		{"full", fullUpdate("c1")},
		{"clears", &acpv2.ToolCallUpdate{ToolCallId: "c1", Title: strClear(), Content: contentClear(), Locations: locClear(), RawInput: valueClear(), Meta: metaClear()}},
		{"extra with nulls", &acpv2.ToolCallUpdate{ToolCallId: "c1", Extra: mustStruct(map[string]any{"x": nil, "y": "v"})}},
		{"unseen id", fullUpdate("c2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			mustApply(t, s, upd(fullUpdate("c1")), chkText("c1", "x"))
			once := mustApply(t, s, upd(tt.u))
			onceSnap := cloneCalls(s.Snapshot())
			twice := mustApply(t, s, upd(tt.u))
			if !proto.Equal(once, twice) {
				t.Errorf("twice:%s", diff(once, twice))
			}
			if !equalCalls(onceSnap, s.Snapshot()) {
				t.Errorf("snapshot differs after second apply")
			}
		})
	}
}

// Returned tool calls may be read by other goroutines while the State keeps
// applying deltas (run with -race).
func TestReadersOfReturnedCallsDoNotRace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  func(i int) op
	}{
		{"chunks", func(i int) op { return chkText("c1", fmt.Sprint(i)) }},
		{"chunks and updates", func(i int) op {
			if i%5 == 0 {
				return upd(&acpv2.ToolCallUpdate{ToolCallId: "c1", Status: strVal(fmt.Sprint(i)), Extra: mustStruct(map[string]any{fmt.Sprint(i % 3): 1.0})})
			}
			return chkText("c1", fmt.Sprint(i))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := merge.New()
			results := make(chan *acpv2.ToolCall, 16)
			done := make(chan error)
			go func() {
				var err error
				for tc := range results {
					if _, e := proto.Marshal(tc); e != nil && err == nil {
						err = e
					}
				}
				done <- err
			}()
			for i := range 500 {
				tc := mustApply(t, s, tt.ops(i))
				results <- tc
				if snap := s.Snapshot(); len(snap) != 1 {
					t.Fatalf("Snapshot has %d calls", len(snap))
				}
			}
			close(results)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
