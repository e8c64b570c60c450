package bridge

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// converter turns one session's gateway events into the `update` objects of
// the session/update notifications the editor gets, in the ACP version the
// editor negotiated. It keeps what the conversion needs to remember: which
// tool calls the editor has been told of, the delta each merged tool call
// follows, and the message ids made up for a v2 editor. It is not safe for
// concurrent use.
type converter struct {
	version acpjson.Version

	// announced: tool-call ids a v1 editor got a `tool_call` for.
	announced map[string]bool
	// delta: the last tool_call_update (v2 patch) per id, waiting for the
	// merged tool call the gateway sends right after it.
	delta map[string]*acpv2.ToolCallUpdate
	// chunked: ids whose last delta was a tool_call_content_chunk.
	chunked map[string]bool

	// For a v2 editor: the message id given to chunks without one, and the
	// kind of the chunk it was given to.
	msgKind, msgID string
}

func newConverter(v acpjson.Version) *converter {
	return &converter{
		version:   v,
		announced: map[string]bool{},
		delta:     map[string]*acpv2.ToolCallUpdate{},
		chunked:   map[string]bool{},
	}
}

// planID is the id of the v2 plan a v1 `plan` becomes: v1 has one plan
// per session.
const planID = "plan"

// updates returns the session/update `update` objects for ev. In a replay
// (session/load, session/resume with replay) the turn's life cycle and its
// permission requests, which are history, are not repeated; the user's
// prompts are shown as the user's messages.
func (c *converter) updates(ev *acpv2.SessionEvent, replay bool) ([]json.RawMessage, error) {
	var out []json.RawMessage
	add := func(u *acpv2.SessionUpdate) error {
		js, err := acpjson.EncodeUpdate(u, c.version)
		if errors.Is(err, acpjson.ErrNoV1Form) {
			return nil // nothing in v1 says it; see the package doc
		}
		if err != nil {
			return err
		}
		out = append(out, js)
		return nil
	}
	var err error
	switch e := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_ToolCallUpdate:
		if c.version == acpjson.V1 {
			c.delta[e.ToolCallUpdate.GetToolCallId()] = e.ToolCallUpdate
			delete(c.chunked, e.ToolCallUpdate.GetToolCallId())
			break
		}
		err = add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: v2Patch(e.ToolCallUpdate)}})
	case *acpv2.SessionEvent_ToolCallContentChunk:
		if c.version == acpjson.V1 {
			c.chunked[e.ToolCallContentChunk.GetToolCallId()] = true
			delete(c.delta, e.ToolCallContentChunk.GetToolCallId())
			break
		}
		err = add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: v2Chunk(e.ToolCallContentChunk)}})
	case *acpv2.SessionEvent_ToolCall:
		// A v2 editor has had the delta itself.
		if c.version == acpjson.V1 {
			var js []byte
			if js, err = c.toolCallV1(e.ToolCall); err == nil {
				out = append(out, js)
			}
		}
	case *acpv2.SessionEvent_Snapshot:
		// Watch's stand-in for events that retention dropped: every tool
		// call as it stands.
		for _, tc := range e.Snapshot.GetToolCalls() {
			if c.version == acpjson.V1 {
				var js []byte
				if js, err = c.toolCallV1(tc); err != nil {
					return nil, err
				}
				out = append(out, js)
				continue
			}
			if err = add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: v2Patch(wholePatch(tc))}}); err != nil {
				return nil, err
			}
		}
	case *acpv2.SessionEvent_Plan:
		if c.version == acpjson.V1 {
			err = add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_Plan{Plan: e.Plan}})
			break
		}
		err = add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_PlanUpdate{PlanUpdate: &acpv2.PlanUpdate{
			Plan: &acpv2.PlanContent{Content: &acpv2.PlanContent_Items{Items: &acpv2.PlanItems{
				PlanId: planID, Entries: e.Plan.GetEntries(),
			}}},
			Meta: e.Plan.GetMeta(),
		}}})
	case *acpv2.SessionEvent_UserMessageChunk, *acpv2.SessionEvent_UserMessage:
		if replay || c.version != acpjson.V1 {
			// The user's messages come from turn_started; see below.
			break
		}
		err = c.message(ev, add)
	case *acpv2.SessionEvent_AgentMessageChunk, *acpv2.SessionEvent_AgentThoughtChunk,
		*acpv2.SessionEvent_AgentMessage, *acpv2.SessionEvent_AgentThought:
		err = c.message(ev, add)
	case *acpv2.SessionEvent_StateUpdate:
		// The bridge reports the turn's state itself (v2), from the
		// gateway's turn events; v1 has no state updates.
	case *acpv2.SessionEvent_TurnStarted:
		c.msgKind = ""
		if !replay && c.version == acpjson.V1 {
			break // a v1 editor shows its own prompt
		}
		err = c.userPrompt(e.TurnStarted.GetPrompt(), add)
		if err == nil && !replay && c.version != acpjson.V1 {
			err = add(stateUpdate("running", ""))
		}
	case *acpv2.SessionEvent_PermissionRequest, *acpv2.SessionEvent_ElicitationRequest:
		if !replay && c.version != acpjson.V1 {
			err = add(stateUpdate("requires_action", ""))
		}
	case *acpv2.SessionEvent_PermissionResolved, *acpv2.SessionEvent_ElicitationResolved:
		if !replay && c.version != acpjson.V1 {
			err = add(stateUpdate("running", ""))
		}
	case *acpv2.SessionEvent_TurnEnded, *acpv2.SessionEvent_StateChanged:
		// The prompt's answer (v1) or the idle state (v2) is the turn's
		// end; the caller handles it.
	default:
		if u := updateOf(ev); u != nil {
			err = add(u)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("encoding event %d: %w", ev.GetSeq(), err)
	}
	return out, nil
}

// toolCallV1 returns the v1 form of merged tool call tc: a `tool_call` the
// first time the editor hears of its id, else a `tool_call_update` made of
// the delta that led to it.
func (c *converter) toolCallV1(tc *acpv2.ToolCall) ([]byte, error) {
	id := tc.GetToolCallId()
	delta, chunked := c.delta[id], c.chunked[id]
	delete(c.delta, id)
	delete(c.chunked, id)
	if !c.announced[id] {
		c.announced[id] = true
		return acpjson.EncodeToolCallV1(v1ToolCall(tc))
	}
	var patch *acpv2.ToolCallUpdate
	switch {
	case delta != nil:
		patch = v1Patch(delta)
	case chunked:
		// v1 cannot append: send the whole content as it now stands.
		patch = v1Patch(&acpv2.ToolCallUpdate{ToolCallId: id, Content: &acpv2.ToolCallContentPatch{
			Op: &acpv2.ToolCallContentPatch_Value{Value: &acpv2.ToolCallContentList{Items: tc.GetContent()}},
		}})
	default:
		patch = v1Patch(wholePatch(tc))
	}
	return acpjson.EncodeUpdate(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: patch}}, acpjson.V1)
}

// v1Patch adapts a v2 patch to what v1 can say. The codec drops a cleared
// scalar (a v1 null means unchanged) and sends a cleared collection as [].
// Where v1 has a value that means what the clear does, the patch gets it
// instead: a cleared kind is ACP's default kind "other", a cleared status
// its default "pending", a cleared title the empty title. Kinds and
// statuses v1's closed enums lack are mapped as [v1Kind] and [v1Status]
// say, and v2 diffs as [v1Content] makes them.
func v1Patch(p *acpv2.ToolCallUpdate) *acpv2.ToolCallUpdate {
	kind, kindOK := v1StringPatch(p.GetKind(), "other", func(v string) (string, bool) { return v1Kind(v), true })
	status, statusOK := v1StringPatch(p.GetStatus(), "pending", v1Status)
	title, titleOK := v1StringPatch(p.GetTitle(), "", func(v string) (string, bool) { return v, true })
	content, contentChanged := v1Content(p.GetContent().GetValue().GetItems())
	if kindOK && statusOK && titleOK && !contentChanged {
		return p
	}
	q := proto.Clone(p).(*acpv2.ToolCallUpdate)
	q.Kind, q.Status, q.Title = kind, status, title
	if contentChanged {
		q.GetContent().GetValue().Items = content
	}
	return q
}

// v1StringPatch returns the v1 form of patch sp: a clear becomes the value
// cleared, a value is mapped by v1Value (a value it refuses leaves the
// field unchanged). same reports that the patch needs no change.
func v1StringPatch(sp *acpv2.StringPatch, cleared string, v1Value func(string) (string, bool)) (_ *acpv2.StringPatch, same bool) {
	value := func(v string) *acpv2.StringPatch { return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: v}} }
	switch op := sp.GetOp().(type) {
	case *acpv2.StringPatch_Clear:
		return value(cleared), false
	case *acpv2.StringPatch_Value:
		v, ok := v1Value(op.Value)
		switch {
		case !ok:
			return nil, false
		case v != op.Value:
			return value(v), false
		}
	}
	return sp, true
}

// v1ToolCall returns tc with its kind and status as v1's closed enums
// allow (see [v1Kind] and [v1Status]) and its v2 diffs as [v1Content]
// makes them.
func v1ToolCall(tc *acpv2.ToolCall) *acpv2.ToolCall {
	kind := v1Kind(tc.GetKind())
	status, ok := v1Status(tc.GetStatus())
	if !ok {
		status = "" // v1's default, pending
	}
	content, contentChanged := v1Content(tc.GetContent())
	if kind == tc.GetKind() && status == tc.GetStatus() && !contentChanged {
		return tc
	}
	out := proto.Clone(tc).(*acpv2.ToolCall)
	out.Kind, out.Status = kind, status
	if contentChanged {
		out.Content = content
	}
	return out
}

// v1Kind maps a tool kind to v1, whose kinds are a closed set: a custom
// (`_`-prefixed) or future kind is "other".
func v1Kind(kind string) string {
	switch acpjson.ToolKind(kind) {
	case acpv2.ToolKind_TOOL_KIND_CUSTOM, acpv2.ToolKind_TOOL_KIND_UNKNOWN:
		return "other"
	}
	return kind
}

// v1Status maps a tool-call status to v1, whose statuses are a closed set
// without v2's "cancelled": cancelled is "failed" (the call did not
// complete), and a custom or future status has no v1 form (ok false).
func v1Status(status string) (_ string, ok bool) {
	switch acpjson.ToolCallStatus(status) {
	case acpv2.ToolCallStatus_TOOL_CALL_STATUS_CANCELLED:
		return "failed", true
	case acpv2.ToolCallStatus_TOOL_CALL_STATUS_CUSTOM, acpv2.ToolCallStatus_TOOL_CALL_STATUS_UNKNOWN:
		return "", false
	}
	return status, true
}

// v1StopReason maps a stop reason to v1, whose reasons are a closed set: a
// custom or future reason is "end_turn".
func v1StopReason(reason string) string {
	switch acpjson.StopReason(reason) {
	case acpv2.StopReason_STOP_REASON_CUSTOM, acpv2.StopReason_STOP_REASON_UNKNOWN, acpv2.StopReason_STOP_REASON_UNSPECIFIED:
		return "end_turn"
	}
	return reason
}

// v1Options drops the permission options whose kind v1's closed set
// lacks (custom or future kinds), unless that would leave none.
func v1Options(opts []*acpv2.PermissionOption) []*acpv2.PermissionOption {
	var out []*acpv2.PermissionOption
	for _, o := range opts {
		switch acpjson.PermissionOptionKind(o.GetKind()) {
		case acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_CUSTOM, acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_UNKNOWN:
			continue
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return opts
	}
	return out
}

// wholePatch returns the patch that sets every field of tc.
func wholePatch(tc *acpv2.ToolCall) *acpv2.ToolCallUpdate {
	str := func(v string) *acpv2.StringPatch {
		if v == "" {
			return nil
		}
		return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: v}}
	}
	val := func(v *structpb.Value) *acpv2.ValuePatch {
		if v == nil {
			return nil
		}
		return &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: v}}
	}
	p := &acpv2.ToolCallUpdate{
		ToolCallId: tc.GetToolCallId(),
		Title:      &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: tc.GetTitle()}},
		Kind:       str(tc.GetKind()),
		Status:     str(tc.GetStatus()),
		Content: &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{
			Value: &acpv2.ToolCallContentList{Items: tc.GetContent()}}},
		Locations: &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{
			Value: &acpv2.ToolCallLocationList{Items: tc.GetLocations()}}},
		RawInput:  val(tc.GetRawInput()),
		RawOutput: val(tc.GetRawOutput()),
		Extra:     tc.GetExtra(),
	}
	if tc.GetMeta() != nil {
		p.Meta = &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: tc.GetMeta()}}
	}
	return p
}

// message converts a message chunk or whole message. A v1 editor gets a
// whole message (v2) as one chunk per content block; a v2 editor gets
// chunks with a message id, made up when the agent (speaking v1) gave
// none.
func (c *converter) message(ev *acpv2.SessionEvent, add func(*acpv2.SessionUpdate) error) error {
	u := updateOf(ev)
	var kind string
	var chunk *acpv2.ContentChunk
	var whole *acpv2.MessageUpdate
	switch v := u.GetUpdate().(type) {
	case *acpv2.SessionUpdate_UserMessageChunk:
		kind, chunk = "user", v.UserMessageChunk
	case *acpv2.SessionUpdate_AgentMessageChunk:
		kind, chunk = "agent", v.AgentMessageChunk
	case *acpv2.SessionUpdate_AgentThoughtChunk:
		kind, chunk = "thought", v.AgentThoughtChunk
	case *acpv2.SessionUpdate_UserMessage:
		kind, whole = "user", v.UserMessage
	case *acpv2.SessionUpdate_AgentMessage:
		kind, whole = "agent", v.AgentMessage
	case *acpv2.SessionUpdate_AgentThought:
		kind, whole = "thought", v.AgentThought
	}
	if c.version == acpjson.V1 {
		if whole == nil {
			return add(u)
		}
		id := whole.GetMessageId()
		for _, b := range whole.GetContent().GetValue().GetItems() {
			cc := &acpv2.ContentChunk{Content: b, MessageId: &id}
			var cu *acpv2.SessionUpdate
			switch kind {
			case "user":
				cu = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_UserMessageChunk{UserMessageChunk: cc}}
			case "agent":
				cu = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_AgentMessageChunk{AgentMessageChunk: cc}}
			default:
				cu = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_AgentThoughtChunk{AgentThoughtChunk: cc}}
			}
			if err := add(cu); err != nil {
				return err
			}
		}
		return nil
	}
	if whole != nil {
		c.msgKind = ""
		return add(u)
	}
	if chunk.MessageId == nil {
		if c.msgKind != kind {
			c.msgKind, c.msgID = kind, newMessageID()
		}
		chunk = proto.Clone(chunk).(*acpv2.ContentChunk)
		chunk.MessageId = &c.msgID
		u = proto.Clone(u).(*acpv2.SessionUpdate)
		setUpdate(u, chunk)
	} else {
		c.msgKind = ""
	}
	return add(u)
}

// userPrompt shows a turn's prompt as the user's message: chunks for v1, a
// whole user_message for v2.
func (c *converter) userPrompt(prompt []*acpv2.ContentBlock, add func(*acpv2.SessionUpdate) error) error {
	id := newMessageID()
	if c.version == acpjson.V1 {
		for _, b := range prompt {
			if err := add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_UserMessageChunk{
				UserMessageChunk: &acpv2.ContentChunk{Content: b, MessageId: &id}}}); err != nil {
				return err
			}
		}
		return nil
	}
	return add(&acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_UserMessage{UserMessage: &acpv2.MessageUpdate{
		MessageId: id,
		Content:   &acpv2.ContentBlockPatch{Op: &acpv2.ContentBlockPatch_Value{Value: &acpv2.ContentBlockList{Items: prompt}}},
	}}})
}

// stateUpdate is a v2 state_update.
func stateUpdate(state, stopReason string) *acpv2.SessionUpdate {
	st := &acpv2.StateUpdate{State: state}
	if stopReason != "" {
		st.StopReason = &stopReason
	}
	return &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_StateUpdate{StateUpdate: st}}
}

var (
	eventOneof  = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	updateOneof = (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor().Oneofs().ByName("update")
)

// updateOf returns the SessionUpdate that event ev carries, or nil for an
// event that is no session update (turn_started, permission_request, ...).
// The two messages share their update variants' names and types.
func updateOf(ev *acpv2.SessionEvent) *acpv2.SessionUpdate {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(eventOneof)
	if fd == nil {
		return nil
	}
	ufd := updateOneof.Fields().ByName(fd.Name())
	if ufd == nil || ufd.Message().FullName() != fd.Message().FullName() {
		return nil
	}
	u := &acpv2.SessionUpdate{}
	u.ProtoReflect().Set(ufd, protoreflect.ValueOfMessage(m.Get(fd).Message()))
	return u
}

// setUpdate replaces the variant of u, whose type is that of v.
func setUpdate(u *acpv2.SessionUpdate, v proto.Message) {
	m := u.ProtoReflect()
	fd := m.WhichOneof(updateOneof)
	m.Set(fd, protoreflect.ValueOfMessage(v.ProtoReflect()))
}

// newMessageID returns a random (version 4) UUID, the form ACP asks message
// ids to have.
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
