package storetest

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// The deepest events: one of every kind a session's log may hold, each
// with its JSON values nested as deep as the gateway lets them be (JSON
// from agents, acpjson.MaxDepth levels in all; a prompt's JSON values,
// acpjson.MaxDepth levels of their own), down the deepest path each
// kind's messages have. Every store must give them back, and protobuf
// must decode them with its default limits, in the responses that carry
// them too: an event stored too deep to decode again broke its session's
// Watch and GetSession for good.

// deepPlaceholder marks where a template takes its nested value.
const deepPlaceholder = "@"

// embeddedResource is the deepest content block: a resource whose
// contents carry _meta (the placeholder).
const embeddedResource = `{"type":"resource","resource":{"uri":"file:///a","text":"t","_meta":@}}`

// updateTemplates are, by the name of SessionUpdate's field, an update of
// that kind with the placeholder at its deepest place.
var updateTemplates = map[protoreflect.Name]string{
	"user_message_chunk":        `{"sessionUpdate":"user_message_chunk","content":` + embeddedResource + `}`,
	"agent_message_chunk":       `{"sessionUpdate":"agent_message_chunk","content":` + embeddedResource + `}`,
	"agent_thought_chunk":       `{"sessionUpdate":"agent_thought_chunk","content":` + embeddedResource + `}`,
	"tool_call_update":          `{"sessionUpdate":"tool_call_update","toolCallId":"deep","status":"completed","content":[{"type":"content","content":` + embeddedResource + `}]}`,
	"tool_call_content_chunk":   `{"sessionUpdate":"tool_call_content_chunk","toolCallId":"deep","content":{"type":"content","content":` + embeddedResource + `}}`,
	"plan":                      `{"sessionUpdate":"plan","entries":[{"content":"x","priority":"high","status":"pending","_meta":@}]}`,
	"plan_update":               `{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p","entries":[{"content":"x","priority":"low","status":"pending","_meta":@}]}}`,
	"available_commands_update": `{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"n","description":"d","input":@}]}`,
	"current_mode_update":       `{"sessionUpdate":"current_mode_update","currentModeId":"m","_meta":@}`,
	"config_option_update":      `{"sessionUpdate":"config_option_update","configOptions":[{"configId":"c","name":"C","type":"select","currentValue":@}]}`,
	"session_info_update":       `{"sessionUpdate":"session_info_update","title":"t","_meta":@}`,
	"usage_update":              `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":0.5,"currency":"USD","_meta":@}}`,
	"user_message":              `{"sessionUpdate":"user_message","messageId":"m","content":[` + embeddedResource + `]}`,
	"agent_message":             `{"sessionUpdate":"agent_message","messageId":"m","content":[` + embeddedResource + `]}`,
	"agent_thought":             `{"sessionUpdate":"agent_thought","messageId":"m","content":[` + embeddedResource + `]}`,
	"state_update":              `{"sessionUpdate":"state_update","state":"running","_meta":@}`,
	"terminal_update":           `{"sessionUpdate":"terminal_update","terminalId":"t","command":"make","_meta":@}`,
	"terminal_output_chunk":     `{"sessionUpdate":"terminal_output_chunk","terminalId":"t","data":"aGk=","_meta":@}`,
	"unknown":                   `{"sessionUpdate":"_vendor_update","payload":@}`,
}

// permissionTemplate is a permission request whose tool call takes the
// placeholder at its deepest place.
const permissionTemplate = `{"toolCall":{"toolCallId":"deep","content":[{"type":"content","content":` + embeddedResource + `}]},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}`

// elicitationTemplate is a form elicitation whose schema takes the
// placeholder at its deepest place.
const elicitationTemplate = `{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{"p":{"type":"string","_meta":` + deepPlaceholder + `}}}}`

// nestedObjects is a JSON value of levels nested objects (the deepest
// kind: each object is three protobuf messages), or a number for none.
func nestedObjects(levels int) string {
	return strings.Repeat(`{"k":`, levels) + "1" + strings.Repeat("}", levels)
}

// deepest fills template's placeholder so that the document nests exactly
// acpjson.MaxDepth levels, and checks that decode takes it and refuses
// one level more.
func deepest(t testing.TB, template string, decode func([]byte) error) []byte {
	t.Helper()
	for levels := 0; levels <= acpjson.MaxDepth; levels++ {
		doc := []byte(strings.Replace(template, deepPlaceholder, nestedObjects(levels), 1))
		if testutil.Nesting(t, doc) < acpjson.MaxDepth {
			continue
		}
		if err := decode(doc); err != nil {
			t.Fatalf("a document %d levels deep is refused: %v\n%s", acpjson.MaxDepth, err, doc)
		}
		over := []byte(strings.Replace(template, deepPlaceholder, nestedObjects(levels+1), 1))
		if decode(over) == nil {
			t.Fatalf("a document %d levels deep is taken: the decoders' cap is not acpjson.MaxDepth", acpjson.MaxDepth+1)
		}
		return doc
	}
	t.Fatalf("no depth of the placeholder makes %s nest %d levels", template, acpjson.MaxDepth)
	return nil
}

// EventOf wraps an update in the SessionEvent that carries it, as a
// session does: the two share variant names and field numbers.
func EventOf(u *acpv2.SessionUpdate) *acpv2.SessionEvent {
	ev := &acpv2.SessionEvent{}
	um := u.ProtoReflect()
	fd := um.WhichOneof(um.Descriptor().Oneofs().ByName("update"))
	if fd == nil {
		return nil
	}
	evFields := ev.ProtoReflect().Descriptor().Fields()
	ev.ProtoReflect().Set(evFields.ByNumber(fd.Number()), protoreflect.ValueOfMessage(um.Get(fd).Message()))
	return ev
}

// deepStruct is a google.protobuf.Struct of levels nested objects, the
// deepest a prompt's JSON values may nest.
func deepStruct(levels int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewNumberValue(1)}}
	for range levels - 1 {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStructValue(s)}}
	}
	return s
}

// DeepestEvents returns the deepest event of every kind a SessionEvent
// has, numbered from 1, and the merged tool call their tool-call updates
// make. It fails the test when a kind has no deepest event: a kind added
// to SessionEvent must be added here.
func DeepestEvents(t testing.TB) ([]*acpv2.SessionEvent, *acpv2.ToolCall) {
	t.Helper()
	byName := map[protoreflect.Name]*acpv2.SessionEvent{}
	updateFields := (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor().Fields()
	for name, template := range updateTemplates {
		doc := deepest(t, template, func(doc []byte) error {
			_, err := acpjson.DecodeUpdate(doc, acpjson.V2)
			return err
		})
		u, _ := acpjson.DecodeUpdate(doc, acpjson.V2)
		if fd := u.ProtoReflect().WhichOneof(updateFields.ByName(name).ContainingOneof()); fd == nil || fd.Name() != name {
			t.Fatalf("the %s template decodes to another kind of update: %v", name, u)
		}
		byName[name] = EventOf(u)
	}
	tools := merge.New()
	call, err := tools.ApplyUpdate(byName["tool_call_update"].GetToolCallUpdate())
	if err != nil {
		t.Fatal(err)
	}
	byName["tool_call"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: call}}
	doc := deepest(t, permissionTemplate, func(doc []byte) error {
		_, err := acpjson.DecodePermissionRequest(doc, acpjson.V2)
		return err
	})
	req, _ := acpjson.DecodePermissionRequest(doc, acpjson.V2)
	req.RequestId = "perm-1"
	if req.Preview, err = tools.Preview(req.GetToolCall()); err != nil {
		t.Fatal(err)
	}
	byName["permission_request"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: req}}
	byName["permission_resolved"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_PermissionResolved{PermissionResolved: &acpv2.PermissionResolved{
		RequestId: "perm-1", Outcome: &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: "a"}}}}}
	doc = deepest(t, elicitationTemplate, func(doc []byte) error {
		_, err := acpjson.DecodeElicitationRequest(doc, acpjson.V2)
		return err
	})
	elicit, _ := acpjson.DecodeElicitationRequest(doc, acpjson.V2)
	elicit.RequestId = "elicit-1"
	byName["elicitation_request"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationRequest{ElicitationRequest: elicit}}
	// Accepted content holds strings, numbers, booleans and arrays of
	// strings only (session.checkContent).
	byName["elicitation_resolved"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationResolved{ElicitationResolved: &acpv2.ElicitationResolved{
		RequestId: "elicit-1", Action: "accept", AnsweredBy: "user", Content: &structpb.Struct{Fields: map[string]*structpb.Value{
			"p": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("v")}})}}}}}
	byName["elicitation_complete"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationComplete{ElicitationComplete: &acpv2.ElicitationComplete{ElicitationId: "e"}}}
	// A prompt's JSON values may nest acpjson.MaxDepth levels of their
	// own, below the deepest content block.
	prompt := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Resource{Resource: &acpv2.EmbeddedResource{
		Resource: &acpv2.EmbeddedResource_TextResource{TextResource: &acpv2.TextResourceContents{
			Uri: "file:///a", Text: "t", Meta: deepStruct(acpjson.MaxDepth)}}}}}
	byName["turn_started"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{Prompt: []*acpv2.ContentBlock{prompt}}}}
	byName["turn_ended"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "end_turn", Reason: acpv2.StopReason_STOP_REASON_END_TURN}}}
	byName["state_changed"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_StateChanged{StateChanged: &acpv2.SessionStateChanged{State: "agent_lost", Detail: "gone"}}}
	byName["snapshot"] = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_Snapshot{Snapshot: &acpv2.SessionSnapshot{
		SessionId: "a", ToolCalls: []*acpv2.ToolCall{call}, LastSeq: 1, PendingElicitations: []*acpv2.ElicitationRequest{elicit}}}}

	var events []*acpv2.SessionEvent
	oneof := (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	for i := range oneof.Fields().Len() {
		name := oneof.Fields().Get(i).Name()
		ev := byName[name]
		if ev == nil {
			t.Fatalf("no deepest event of kind %s: add one to storetest.DeepestEvents", name)
		}
		ev.Seq = uint64(len(events) + 1)
		events = append(events, ev)
	}
	return events, call
}

// ReadDepth is the recursion limit protobuf-go needs to decode m from
// its encoding: how deeply its messages nest, as protobuf-go counts.
func ReadDepth(t testing.TB, m proto.Message) int {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := 1, 20000
	for lo < hi {
		mid := (lo + hi) / 2
		if (proto.UnmarshalOptions{RecursionLimit: mid}).Unmarshal(b, m.ProtoReflect().New().Interface()) == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// MaxReadDepth bounds how deeply the messages of a stored event, in the
// response that carries it to a client, nest: each of the acpjson.MaxDepth
// levels of JSON is at most three (a google.protobuf.Value, its Struct and
// the Struct's map entry), and the messages above the JSON values add a
// few more. The deepest events measure 198 (a prompt's _meta in a
// WatchResponse), against protobuf-go's default RecursionLimit of 10000.
const MaxReadDepth = 3*acpjson.MaxDepth + 16

// testDeepestEvents stores the deepest events and reads them back: as
// Events and ToolCalls give them, and inside the responses that carry
// them to clients, all within MaxReadDepth.
func testDeepestEvents(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	if err := s.CreateSession(ctx, session("a", "")); err != nil {
		t.Fatal(err)
	}
	events, call := DeepestEvents(t)
	if err := s.Append(ctx, "a", Encode(t, events...), Calls(t, call)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "a", 0, 0)
	if err != nil {
		t.Fatalf("the deepest events do not read back: %v", err)
	}
	if len(got) != len(events) {
		t.Fatalf("%d events read back of %d", len(got), len(events))
	}
	for i, ev := range Messages(t, got) {
		if !proto.Equal(ev, events[i]) {
			t.Fatalf("event %d (%s) reads back changed", ev.GetSeq(), ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event")).Name())
		}
		if d := ReadDepth(t, &acpv2.WatchResponse{Event: ev}); d > MaxReadDepth {
			t.Errorf("event %d nests %d levels deep in a WatchResponse, over %d", ev.GetSeq(), d, MaxReadDepth)
		}
	}
	calls, _, err := s.ToolCalls(ctx, "a")
	if err != nil || len(calls) != 1 || !proto.Equal(calls[0], call) {
		t.Fatalf("the deepest tool call reads back as %v, %v", calls, err)
	}
	if d := ReadDepth(t, &acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{ToolCalls: calls}}); d > MaxReadDepth {
		t.Errorf("the deepest tool call nests %d levels deep in a GetSessionResponse, over %d", d, MaxReadDepth)
	}
}
