package merge

import (
	"bytes"
	"errors"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// ErrNoToolCallID is returned by ApplyUpdate, ApplyChunk and Preview for an
// update or chunk whose tool_call_id is empty (or that is nil). The state is
// left unchanged.
var ErrNoToolCallID = errors.New("merge: empty tool_call_id")

// ErrNoContent is returned by ApplyChunk for a chunk that carries no content
// item. The state is left unchanged.
var ErrNoContent = errors.New("merge: tool call content chunk has no content")

// State is one session's tool-call state: the merged ToolCall of every
// tool_call_id seen so far, in the order each id was first seen. The zero
// value is not ready for use; call New or Restore. A State is not safe for
// concurrent use.
type State struct {
	index map[string]int // tool_call_id -> position in calls
	calls []entry        // in first-seen order
	// bytes is the sum of the calls' sizes (see Bytes).
	bytes int
}

// entry is one tool call's current version plus the State's private append
// buffer for its content.
//
// When buf is non-nil, call.Content == buf[:len(buf):len(buf)]: both views
// share one backing array, and every slice the State has handed out is
// clipped to its length, so the elements of that array beyond len(buf) are
// reachable from no returned message. The State is then the only writer of
// that spare capacity and a chunk can append into it in amortised O(1)
// without changing any earlier version. buf is nil whenever call.Content came
// from elsewhere (an update, Restore) and so must not be appended to in place.
//
// After Compact, call and buf are nil and wire holds the tool call in its
// protobuf wire form, until the entry is next used (see load).
//
// enc, when not nil, is the encoding of encCall, a version of the call
// (see Encoded), which compacting it keeps rather than marshal it again.
//
// size is the bytes the call took in a snapshot when last encoded (see
// Bytes), and thin is set while the call is trimmed (see ThinOldest).
type entry struct {
	call *acpv2.ToolCall
	buf  []*acpv2.ToolCallContent
	wire []byte
	enc  []byte
	// encCall is the version enc encodes.
	encCall *acpv2.ToolCall
	size    int
	thin    bool
}

// load returns the entry's tool call, decoding it when compacted; keep
// leaves a compacted entry as it is (the result is then a fresh message
// that only the caller holds).
func (e *entry) load(keep bool) *acpv2.ToolCall {
	if e.call != nil || e.wire == nil {
		return e.call
	}
	c := &acpv2.ToolCall{}
	// An error cannot happen (Compact wrote these bytes from a valid
	// message); what was decoded is kept all the same.
	_ = proto.Unmarshal(e.wire, c)
	if !keep {
		e.call, e.wire = c, nil
	}
	return c
}

// Compact keeps every tool call in its protobuf wire form until it is next
// needed: a tenth or so of the memory of the message, most of all for
// google.protobuf.Struct values in rawInput and _meta. A session compacts
// its state between turns, when it may stay idle for long. Results handed
// out earlier are unaffected; the next ones are equal messages, not the
// same ones.
func (s *State) Compact() {
	for i := range s.calls {
		s.calls[i].compact()
	}
}

// CompactCall is Compact for the tool call id alone (nothing happens for
// an unknown id). A session compacts each call as it finishes, during a
// turn: a long turn's finished calls would otherwise stay whole messages
// that the garbage collector walks in every cycle until the turn ends.
// Its encoding is the one Encoded recorded, when recorded for its
// current version, so that compacting a call just encoded marshals
// nothing.
func (s *State) CompactCall(id string) {
	if i, ok := s.index[id]; ok {
		s.calls[i].compact()
	}
}

// compact keeps e's tool call in its wire form; a call that does not
// marshal is kept as it is.
func (e *entry) compact() {
	if e.call == nil {
		return
	}
	var b []byte
	if e.enc != nil && e.encCall == e.call {
		b = bytes.Clone(e.enc) // not the event's buffer it is within
	} else {
		var err error
		if b, err = proto.Marshal(e.call); err != nil {
			return
		}
	}
	*e = entry{wire: b, size: e.size, thin: e.thin}
}

// New returns an empty State.
func New() *State {
	return &State{index: make(map[string]int)}
}

// Restore rebuilds a State from a snapshot list (in first-seen order), e.g.
// after a restart. The tool calls are shared, not copied, and are never
// modified by the State. Nil entries and entries with an empty tool_call_id
// are skipped; if an id occurs more than once, the last tool call wins and the
// id keeps the position of its first occurrence.
func Restore(calls []*acpv2.ToolCall) *State {
	s := &State{
		index: make(map[string]int, len(calls)),
		calls: make([]entry, 0, len(calls)),
	}
	for _, c := range calls {
		id := c.GetToolCallId()
		if id == "" {
			continue
		}
		i, ok := s.index[id]
		if !ok {
			i = len(s.calls)
			s.index[id] = i
			s.calls = append(s.calls, entry{})
		}
		e := &s.calls[i]
		s.bytes -= e.size
		*e = entry{call: c, thin: IsThin(c)}
		s.setSize(e, proto.Size(c))
	}
	return s
}

// ApplyUpdate applies u and returns the merged tool call after it. An unseen
// tool_call_id creates a tool call; a seen one patches it. The returned
// ToolCall is a new message that the State never modifies later; it shares
// unchanged field values with the previous version and with u.
func (s *State) ApplyUpdate(u *acpv2.ToolCallUpdate) (*acpv2.ToolCall, error) {
	id := u.GetToolCallId()
	if id == "" {
		return nil, ErrNoToolCallID
	}
	i, ok := s.index[id]
	if !ok {
		next := applyUpdate(id, nil, u)
		s.add(id, entry{call: next})
		return next, nil
	}
	e := &s.calls[i]
	e.thin = false // changed: it may be trimmed again
	next := applyUpdate(id, e.load(false), u)
	if u.GetContent().GetOp() != nil {
		// The content now comes from u (or is nil): the append buffer no
		// longer backs it.
		e.buf = nil
	}
	e.call = next
	return next, nil
}

// ApplyChunk appends c.Content to the tool call's content and returns the
// merged tool call. A chunk for an unseen tool_call_id creates the tool call
// with that one item. The chunk's own meta and extra are not merged. The
// returned ToolCall is a new message that the State never modifies later.
func (s *State) ApplyChunk(c *acpv2.ToolCallContentChunk) (*acpv2.ToolCall, error) {
	id := c.GetToolCallId()
	if id == "" {
		return nil, ErrNoToolCallID
	}
	item := c.GetContent()
	if item == nil {
		return nil, ErrNoContent
	}
	i, ok := s.index[id]
	if !ok {
		buf := make([]*acpv2.ToolCallContent, 1, 4)
		buf[0] = item
		next := &acpv2.ToolCall{ToolCallId: id, Content: buf[:1:1]}
		s.add(id, entry{call: next, buf: buf})
		return next, nil
	}
	e := &s.calls[i]
	e.thin = false
	prev := e.load(false)
	if e.buf == nil {
		// Content is not ours to grow: copy it into a fresh array. Clipping
		// forces append to allocate, with room to spare for later chunks.
		e.buf = append(slices.Clip(prev.Content), item)
	} else {
		e.buf = append(e.buf, item)
	}
	n := len(e.buf)
	next := applyUpdate(id, prev, nil)
	next.Content = e.buf[:n:n]
	e.call = next
	return next, nil
}

// Preview returns the tool call as it would be with u applied, without
// storing anything. The id may be one not yet seen (then the preview is built
// from an empty tool call).
func (s *State) Preview(u *acpv2.ToolCallUpdate) (*acpv2.ToolCall, error) {
	id := u.GetToolCallId()
	if id == "" {
		return nil, ErrNoToolCallID
	}
	return applyUpdate(id, s.Get(id), u), nil
}

// Apply returns prev (nil for a call not seen) with u applied, as a
// State would store it, without a State: for a call read from a store.
// It modifies neither; u must have a tool call id.
func Apply(prev *acpv2.ToolCall, u *acpv2.ToolCallUpdate) (*acpv2.ToolCall, error) {
	id := u.GetToolCallId()
	if id == "" {
		return nil, ErrNoToolCallID
	}
	return applyUpdate(id, prev, u), nil
}

// Get returns the stored tool call for id, or nil. The result must not be
// modified.
func (s *State) Get(id string) *acpv2.ToolCall {
	i, ok := s.index[id]
	if !ok {
		return nil
	}
	return s.calls[i].load(false)
}

// Snapshot returns every tool call in the order its id was first seen. The
// slice is new and belongs to the caller; the tool calls in it are shared and
// must not be modified. It leaves a compacted State compacted.
func (s *State) Snapshot() []*acpv2.ToolCall {
	out := make([]*acpv2.ToolCall, len(s.calls))
	for i := range s.calls {
		out[i] = s.calls[i].load(true)
	}
	return out
}

// Has reports whether the State holds a tool call of id.
func (s *State) Has(id string) bool {
	_, ok := s.index[id]
	return ok
}

// Len returns the number of tool calls.
func (s *State) Len() int {
	return len(s.calls)
}

func (s *State) add(id string, e entry) {
	s.index[id] = len(s.calls)
	s.calls = append(s.calls, e)
}

// applyUpdate returns a new ToolCall: prev (nil for an unseen id) with u
// applied, or a copy of prev when u is nil. It modifies neither prev nor u.
func applyUpdate(id string, prev *acpv2.ToolCall, u *acpv2.ToolCallUpdate) *acpv2.ToolCall {
	return &acpv2.ToolCall{
		ToolCallId: id,
		Title:      patchString(prev.GetTitle(), u.GetTitle()),
		Kind:       patchString(prev.GetKind(), u.GetKind()),
		Status:     patchString(prev.GetStatus(), u.GetStatus()),
		Content:    patchContent(prev.GetContent(), u.GetContent()),
		Locations:  patchLocations(prev.GetLocations(), u.GetLocations()),
		RawInput:   patchValue(prev.GetRawInput(), u.GetRawInput()),
		RawOutput:  patchValue(prev.GetRawOutput(), u.GetRawOutput()),
		Meta:       patchStruct(prev.GetMeta(), u.GetMeta()),
		Extra:      mergeExtra(prev.GetExtra(), u.GetExtra()),
	}
}

func patchString(old string, p *acpv2.StringPatch) string {
	switch op := p.GetOp().(type) {
	case *acpv2.StringPatch_Clear:
		return ""
	case *acpv2.StringPatch_Value:
		return op.Value
	default:
		return old
	}
}

func patchContent(old []*acpv2.ToolCallContent, p *acpv2.ToolCallContentPatch) []*acpv2.ToolCallContent {
	switch op := p.GetOp().(type) {
	case *acpv2.ToolCallContentPatch_Clear:
		return nil
	case *acpv2.ToolCallContentPatch_Value:
		return clipOrNil(op.Value.GetItems())
	default:
		return old
	}
}

func patchLocations(old []*acpv2.ToolCallLocation, p *acpv2.ToolCallLocationPatch) []*acpv2.ToolCallLocation {
	switch op := p.GetOp().(type) {
	case *acpv2.ToolCallLocationPatch_Clear:
		return nil
	case *acpv2.ToolCallLocationPatch_Value:
		return clipOrNil(op.Value.GetItems())
	default:
		return old
	}
}

// clipOrNil returns nil for an empty list, and otherwise the list clipped to
// its length, so that appending to it can never write into the caller's
// spare capacity.
func clipOrNil[E any](s []E) []E {
	if len(s) == 0 {
		return nil
	}
	return slices.Clip(s)
}

func patchValue(old *structpb.Value, p *acpv2.ValuePatch) *structpb.Value {
	switch op := p.GetOp().(type) {
	case *acpv2.ValuePatch_Clear:
		return nil
	case *acpv2.ValuePatch_Value:
		return op.Value
	default:
		return old
	}
}

func patchStruct(old *structpb.Struct, p *acpv2.StructPatch) *structpb.Struct {
	switch op := p.GetOp().(type) {
	case *acpv2.StructPatch_Clear:
		return nil
	case *acpv2.StructPatch_Value:
		return op.Value
	default:
		return old
	}
}

// mergeExtra merges patch into old key by key: a null value deletes the key,
// any other value replaces it. It returns old itself when patch has no keys,
// and nil when the result has no keys. Neither argument is modified.
func mergeExtra(old, patch *structpb.Struct) *structpb.Struct {
	pf := patch.GetFields()
	if len(pf) == 0 {
		return old
	}
	of := old.GetFields()
	if len(of) == 0 && !hasNull(pf) {
		return patch // nothing to merge with or delete: share it
	}
	m := make(map[string]*structpb.Value, len(of)+len(pf))
	maps.Copy(m, of)
	for k, v := range pf {
		if isNull(v) {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	if len(m) == 0 {
		return nil
	}
	return &structpb.Struct{Fields: m}
}

func hasNull(fields map[string]*structpb.Value) bool {
	for _, v := range fields {
		if isNull(v) {
			return true
		}
	}
	return false
}

// isNull reports whether v is JSON null: a NullValue, a nil *Value, or a
// Value with no kind set (which protojson cannot encode as anything else).
func isNull(v *structpb.Value) bool {
	switch v.GetKind().(type) {
	case *structpb.Value_NullValue, nil:
		return true
	default:
		return false
	}
}
