package merge_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// source is the randomness a generator draws from: *rand.Rand for property
// tests, fuzz bytes for FuzzApply.
type source interface {
	IntN(n int) int
}

// byteSource draws from fuzz input bytes and yields 0 once they run out.
type byteSource struct{ b []byte }

func (s *byteSource) IntN(n int) int {
	if n <= 1 || len(s.b) == 0 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v % n
}

// gen generates random updates and chunks over a few ids.
type gen struct {
	src  source
	nIDs int
}

func (g *gen) n(n int) int       { return g.src.IntN(n) }
func (g *gen) chance(n int) bool { return g.n(n) == 0 }

var (
	stringPool = []string{"", "read", "edit", "in_progress", "completed", "_custom", "future_value", "Tïtle ✓"}
	keyPool    = []string{"a", "b", "c", "_x", "trace"}
)

func (g *gen) str() string { return stringPool[g.n(len(stringPool))] }

func (g *gen) id() string {
	if g.chance(40) {
		return "" // exercises ErrNoToolCallID
	}
	return fmt.Sprintf("call_%d", g.n(g.nIDs))
}

func (g *gen) op() op {
	if g.chance(3) {
		return op{c: g.chunk()}
	}
	return op{u: g.update(g.id())}
}

func (g *gen) chunk() *acpv2.ToolCallContentChunk {
	c := &acpv2.ToolCallContentChunk{ToolCallId: g.id()}
	if !g.chance(25) { // sometimes no content: exercises ErrNoContent
		c.Content = g.item()
	}
	if g.chance(4) {
		c.Meta = g.structv(1)
	}
	if g.chance(4) {
		c.Extra = g.extra()
	}
	return c
}

// patchOp picks omitted (0), clear (1), value (2) or an empty wrapper (3).
func (g *gen) patchOp() int {
	switch g.n(8) {
	case 0, 1, 2:
		return 0
	case 3:
		return 1
	case 7:
		return 3
	default:
		return 2
	}
}

func (g *gen) strPatch() *acpv2.StringPatch {
	switch g.patchOp() {
	case 1:
		return strClear()
	case 2:
		return strVal(g.str())
	case 3:
		return &acpv2.StringPatch{}
	}
	return nil
}

func (g *gen) update(id string) *acpv2.ToolCallUpdate {
	u := &acpv2.ToolCallUpdate{
		ToolCallId: id,
		Title:      g.strPatch(),
		Kind:       g.strPatch(),
		Status:     g.strPatch(),
	}
	switch g.patchOp() {
	case 1:
		u.Content = contentClear()
	case 2:
		u.Content = contentVal(g.items()...)
	case 3:
		u.Content = &acpv2.ToolCallContentPatch{}
	}
	switch g.patchOp() {
	case 1:
		u.Locations = locClear()
	case 2:
		u.Locations = locVal(g.locations()...)
	case 3:
		u.Locations = &acpv2.ToolCallLocationPatch{}
	}
	u.RawInput = g.valuePatch()
	u.RawOutput = g.valuePatch()
	switch g.patchOp() {
	case 1:
		u.Meta = metaClear()
	case 2:
		u.Meta = metaVal(g.structv(2))
	case 3:
		u.Meta = &acpv2.StructPatch{}
	}
	if g.chance(2) {
		u.Extra = g.extra()
	}
	return u
}

func (g *gen) valuePatch() *acpv2.ValuePatch {
	switch g.patchOp() {
	case 1:
		return valueClear()
	case 2:
		return valueVal(g.value(2))
	case 3:
		return &acpv2.ValuePatch{}
	}
	return nil
}

func (g *gen) items() []*acpv2.ToolCallContent {
	n := g.n(4)
	if n == 0 && g.chance(2) {
		return nil
	}
	items := make([]*acpv2.ToolCallContent, n)
	for i := range items {
		items[i] = g.item()
	}
	return items
}

func (g *gen) item() *acpv2.ToolCallContent {
	var it *acpv2.ToolCallContent
	switch g.n(5) {
	case 0:
		it = textItem(g.str())
	case 1:
		d := &acpv2.Diff{}
		if !g.chance(4) {
			p := "/" + g.str()
			d.Path = &p
		}
		if g.chance(2) {
			o := g.str()
			d.OldText = &o
		}
		nt := g.str()
		d.NewText = &nt
		it = &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{Diff: d}}
	case 2:
		it = terminalItem("term_" + g.str())
	case 3:
		u := g.structv(1)
		if u.Fields == nil {
			u.Fields = map[string]*structpb.Value{}
		}
		u.Fields["type"] = structpb.NewStringValue("hologram")
		it = &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Unknown{Unknown: u}}
	default:
		it = &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Image{
				Image: &acpv2.ImageContent{Data: "aGk=", MimeType: "image/png"},
			}},
		}}
	}
	if g.chance(5) {
		it.Meta = g.structv(1)
	}
	if g.chance(5) {
		it.Extra = g.structv(1)
	}
	return it
}

func (g *gen) locations() []*acpv2.ToolCallLocation {
	n := g.n(4)
	if n == 0 && g.chance(2) {
		return nil
	}
	locs := make([]*acpv2.ToolCallLocation, n)
	for i := range locs {
		l := &acpv2.ToolCallLocation{Path: "/" + g.str()}
		if g.chance(2) {
			line := uint32(g.n(200))
			l.Line = &line
		}
		if g.chance(6) {
			l.Extra = g.structv(1)
		}
		locs[i] = l
	}
	return locs
}

func (g *gen) value(depth int) *structpb.Value {
	k := g.n(6)
	if depth <= 0 && k >= 4 {
		k = g.n(4)
	}
	switch k {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewNumberValue(float64(g.n(100)) - 7.5)
	case 2:
		return structpb.NewStringValue(g.str())
	case 3:
		return structpb.NewBoolValue(g.chance(2))
	case 4:
		n := g.n(3)
		vals := make([]*structpb.Value, n)
		for i := range vals {
			vals[i] = g.value(depth - 1)
		}
		return structpb.NewListValue(&structpb.ListValue{Values: vals})
	default:
		return structpb.NewStructValue(g.structv(depth - 1))
	}
}

func (g *gen) structv(depth int) *structpb.Struct {
	n := g.n(4)
	s := &structpb.Struct{}
	if n == 0 {
		return s
	}
	s.Fields = make(map[string]*structpb.Value, n)
	for range n {
		s.Fields[keyPool[g.n(len(keyPool))]] = g.value(depth)
	}
	return s
}

// extra is an update's extra: some keys set, some null (delete).
func (g *gen) extra() *structpb.Struct {
	n := g.n(4)
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, n)}
	for range n {
		var v *structpb.Value
		if g.chance(3) {
			v = structpb.NewNullValue()
		} else {
			v = g.value(1)
		}
		s.Fields[keyPool[g.n(len(keyPool))]] = v
	}
	return s
}

// randomOps returns 1–50 random ops over 1–5 ids.
func randomOps(r *rand.Rand) []op {
	g := &gen{src: r, nIDs: 1 + r.IntN(5)}
	ops := make([]op, 1+r.IntN(50))
	for i := range ops {
		ops[i] = g.op()
	}
	return ops
}

// fuzzOps decodes fuzz bytes into ops until the bytes run out.
func fuzzOps(data []byte) []op {
	src := &byteSource{b: data}
	g := &gen{src: src, nIDs: 1 + src.IntN(5)}
	var ops []op
	for len(src.b) > 0 && len(ops) < 64 {
		ops = append(ops, g.op())
	}
	return ops
}

// model is a deliberately naive reference implementation of the merge rules:
// it copies the stored tool call, mutates the copy and stores it. The copy is
// shallow except for the lists, and the model only ever reassigns fields of
// the copy, so no message it has returned is changed later.
type model struct {
	calls map[string]*acpv2.ToolCall
	order []string
}

func newModel() *model { return &model{calls: map[string]*acpv2.ToolCall{}} }

func (m *model) current(id string) *acpv2.ToolCall {
	tc, ok := m.calls[id]
	if !ok {
		return &acpv2.ToolCall{ToolCallId: id}
	}
	return &acpv2.ToolCall{
		ToolCallId: tc.ToolCallId,
		Title:      tc.Title,
		Kind:       tc.Kind,
		Status:     tc.Status,
		Content:    slices.Clone(tc.Content),
		Locations:  slices.Clone(tc.Locations),
		RawInput:   tc.RawInput,
		RawOutput:  tc.RawOutput,
		Meta:       tc.Meta,
		Extra:      tc.Extra,
	}
}

func (m *model) store(tc *acpv2.ToolCall) *acpv2.ToolCall {
	if _, ok := m.calls[tc.ToolCallId]; !ok {
		m.order = append(m.order, tc.ToolCallId)
	}
	m.calls[tc.ToolCallId] = tc
	return tc
}

func (m *model) apply(o op) (*acpv2.ToolCall, error) {
	if o.u != nil {
		return m.applyUpdate(o.u)
	}
	c := o.c
	if c.GetToolCallId() == "" {
		return nil, merge.ErrNoToolCallID
	}
	if c.GetContent() == nil {
		return nil, merge.ErrNoContent
	}
	tc := m.current(c.ToolCallId)
	tc.Content = append(tc.Content, c.Content)
	return m.store(tc), nil
}

func (m *model) preview(u *acpv2.ToolCallUpdate) (*acpv2.ToolCall, error) {
	if u.GetToolCallId() == "" {
		return nil, merge.ErrNoToolCallID
	}
	return mergeInto(m.current(u.ToolCallId), u), nil
}

func (m *model) applyUpdate(u *acpv2.ToolCallUpdate) (*acpv2.ToolCall, error) {
	tc, err := m.preview(u)
	if err != nil {
		return nil, err
	}
	return m.store(tc), nil
}

func mergeInto(tc *acpv2.ToolCall, u *acpv2.ToolCallUpdate) *acpv2.ToolCall {
	str := func(dst *string, p *acpv2.StringPatch) {
		if p == nil || p.Op == nil {
			return
		}
		if _, ok := p.Op.(*acpv2.StringPatch_Clear); ok {
			*dst = ""
			return
		}
		*dst = p.GetValue()
	}
	str(&tc.Title, u.Title)
	str(&tc.Kind, u.Kind)
	str(&tc.Status, u.Status)
	if p := u.Content; p != nil && p.Op != nil {
		tc.Content = nil
		tc.Content = append(tc.Content, p.GetValue().GetItems()...)
	}
	if p := u.Locations; p != nil && p.Op != nil {
		tc.Locations = nil
		tc.Locations = append(tc.Locations, p.GetValue().GetItems()...)
	}
	val := func(dst **structpb.Value, p *acpv2.ValuePatch) {
		if p == nil || p.Op == nil {
			return
		}
		*dst = p.GetValue() // nil for clear
	}
	val(&tc.RawInput, u.RawInput)
	val(&tc.RawOutput, u.RawOutput)
	if p := u.Meta; p != nil && p.Op != nil {
		tc.Meta = p.GetValue() // nil for clear
	}
	if len(u.GetExtra().GetFields()) > 0 {
		fields := maps.Clone(tc.GetExtra().GetFields())
		if fields == nil {
			fields = map[string]*structpb.Value{}
		}
		for k, v := range u.Extra.Fields {
			if _, isNull := v.GetKind().(*structpb.Value_NullValue); isNull || v.GetKind() == nil {
				delete(fields, k)
			} else {
				fields[k] = v
			}
		}
		tc.Extra = nil
		if len(fields) > 0 {
			tc.Extra = &structpb.Struct{Fields: fields}
		}
	}
	return tc
}

func (m *model) snapshot() []*acpv2.ToolCall {
	out := make([]*acpv2.ToolCall, len(m.order))
	for i, id := range m.order {
		out[i] = m.calls[id]
	}
	return out
}

// checkSequence applies ops to a fresh State and checks, after every op, that
// the result matches the reference model and Preview; and at the end the
// replay property (last result per id == Snapshot entry; replaying the deltas
// onto a fresh State gives an equal Snapshot) and that no returned tool call
// was mutated after it was returned.
func checkSequence(t testing.TB, ops []op) {
	t.Helper()
	s := merge.New()
	m := newModel()
	last := map[string]*acpv2.ToolCall{}
	var kept, clones []*acpv2.ToolCall
	for i, o := range ops {
		if o.u != nil {
			lenBefore := s.Len()
			p, perr := s.Preview(o.u)
			mp, mperr := m.preview(o.u)
			if !errors.Is(perr, mperr) || !proto.Equal(p, mp) {
				t.Fatalf("op %d %v: Preview = %v, %v; model %v, %v", i, o, p, perr, mp, mperr)
			}
			if s.Len() != lenBefore {
				t.Fatalf("op %d: Preview changed Len", i)
			}
			if p != nil {
				kept = append(kept, p)
				clones = append(clones, proto.Clone(p).(*acpv2.ToolCall))
			}
		}
		got, err := apply(s, o)
		want, werr := m.apply(o)
		if !errors.Is(err, werr) || (err == nil) != (werr == nil) {
			t.Fatalf("op %d %v: err = %v, model err = %v", i, o, err, werr)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("op %d %v:%s", i, o, diff(want, got))
		}
		if err == nil {
			last[got.ToolCallId] = got
			kept = append(kept, got)
			clones = append(clones, proto.Clone(got).(*acpv2.ToolCall))
		}
	}

	snap := s.Snapshot()
	if len(snap) != len(last) || s.Len() != len(last) {
		t.Fatalf("Snapshot has %d calls (Len %d), %d ids were returned", len(snap), s.Len(), len(last))
	}
	for _, tc := range snap {
		if !proto.Equal(tc, last[tc.ToolCallId]) {
			t.Fatalf("Snapshot entry %q is not the last returned result:%s", tc.ToolCallId, diff(last[tc.ToolCallId], tc))
		}
		if !proto.Equal(s.Get(tc.ToolCallId), tc) {
			t.Fatalf("Get(%q) differs from Snapshot", tc.ToolCallId)
		}
	}
	if !equalCalls(snap, m.snapshot()) {
		t.Fatalf("Snapshot differs from model:\n got: %v\nwant: %v", snap, m.snapshot())
	}

	replay := merge.New()
	for _, o := range ops {
		_, _ = apply(replay, o)
	}
	if !equalCalls(replay.Snapshot(), snap) {
		t.Fatalf("replay Snapshot differs:\n got: %v\nwant: %v", replay.Snapshot(), snap)
	}

	for i := range kept {
		if !proto.Equal(kept[i], clones[i]) {
			t.Fatalf("returned tool call %d was mutated later:%s", i, diff(clones[i], kept[i]))
		}
	}
}

// checkRestore applies ops[:k] to a State, restores a second State from its
// Snapshot and checks that both give the same results for ops[k:].
func checkRestore(t testing.TB, ops []op, k int) {
	t.Helper()
	s := merge.New()
	for _, o := range ops[:k] {
		_, _ = apply(s, o)
	}
	r := merge.Restore(s.Snapshot())
	if !equalCalls(r.Snapshot(), s.Snapshot()) {
		t.Fatalf("Restore(Snapshot()) differs")
	}
	for i, o := range ops[k:] {
		got1, err1 := apply(s, o)
		got2, err2 := apply(r, o)
		if !errors.Is(err1, err2) || !proto.Equal(got1, got2) {
			t.Fatalf("op %d %v after restore: original %v, %v; restored %v, %v", k+i, o, got1, err1, got2, err2)
		}
	}
	if !equalCalls(r.Snapshot(), s.Snapshot()) {
		t.Fatalf("final Snapshot differs:\noriginal: %v\nrestored: %v", s.Snapshot(), r.Snapshot())
	}
}

// checkCompact applies ops to two States, compacting one of them before
// each op whose index every divides, and checks that both give equal
// results, Gets and Snapshots throughout, and that a Snapshot leaves the
// compacted State compacted.
func checkCompact(t testing.TB, ops []op, every int) {
	t.Helper()
	plain, compacted := merge.New(), merge.New()
	for i, o := range ops {
		if i%every == 0 {
			compacted.Compact()
			if !equalCalls(compacted.Snapshot(), plain.Snapshot()) {
				t.Fatalf("op %d: Snapshot after Compact differs:\n got: %v\nwant: %v", i, compacted.Snapshot(), plain.Snapshot())
			}
		}
		got1, _, err1 := applyBoth(t, i, o, plain, compacted, "after Compact")
		if err1 == nil && !proto.Equal(plain.Get(got1.ToolCallId), compacted.Get(got1.ToolCallId)) {
			t.Fatalf("op %d: Get(%q) differs after Compact", i, got1.ToolCallId)
		}
	}
	compacted.Compact()
	if !equalCalls(compacted.Snapshot(), plain.Snapshot()) || compacted.Len() != plain.Len() {
		t.Fatalf("final Snapshot differs after Compact:\n got: %v\nwant: %v", compacted.Snapshot(), plain.Snapshot())
	}
	// A compacted State decodes afresh for each Snapshot: had the first
	// one expanded it again, the second would hand out the same messages.
	if first, second := compacted.Snapshot(), compacted.Snapshot(); len(first) > 0 && first[0] == second[0] {
		t.Fatal("Snapshot expanded the compacted State")
	}
}

// checkWire applies ops, compacting before each op whose index every
// divides, and checks that encoded.Calls encodes each merged tool call as
// a session does, from the version before it, with the parts of the op
// that made it (on odd ops) or without, and the version before it, no
// longer the current one, to bytes that decode to it; and that the
// event's head, written in the room before the first encoding of a
// version (every third op), changes nothing the next version reads.
// (merge does not encode; the session pairs it with encoded.Calls, and
// this is the pair's property.)
func checkWire(t testing.TB, ops []op, every int) {
	t.Helper()
	s, c := merge.New(), &encoded.Calls{}
	decode := func(i int, what string, tc *acpv2.ToolCall, parts *encoded.Parts) {
		t.Helper()
		wire := c.Body(tc, parts).Bytes()
		back := &acpv2.ToolCall{}
		if err := proto.Unmarshal(wire, back); wire == nil || err != nil || !proto.Equal(back, tc) {
			t.Fatalf("op %d: Body(%s) decodes to %v (%v), want %v", i, what, back, err, tc)
		}
	}
	var prev *acpv2.ToolCall
	for i, o := range ops {
		if i%every == 0 {
			s.Compact()
			c.Reset()
		}
		got, err := apply(s, o)
		if err != nil {
			continue
		}
		var parts *encoded.Parts
		if i%2 == 1 {
			parts = opParts(t, o)
		}
		if i%3 == 0 {
			// With the event's head written in the room before it.
			ev := &acpv2.SessionEvent{Seq: uint64(i + 1), Event: &acpv2.SessionEvent_ToolCall{ToolCall: got}}
			e, marshalled, err := encoded.Numbered([]*acpv2.SessionEvent{ev}, []encoded.Body{c.Body(got, parts)})
			if err != nil || marshalled != 0 {
				t.Fatalf("op %d: the merged call's event is not made of its body: marshalled %d, %v", i, marshalled, err)
			}
			back := &acpv2.SessionEvent{}
			if err := proto.Unmarshal(e[0].Proto(), back); err != nil || !proto.Equal(back, ev) {
				t.Fatalf("op %d: the event decodes to %v (%v)", i, back, err)
			}
		}
		decode(i, "merged", got, parts)
		decode(i, "merged, again", got, nil)
		if prev != nil {
			decode(i, "an earlier version", prev, nil)
		}
		prev = got
		if i%4 == 1 {
			// As a session compacts a finished call: the next version
			// is encoded from the call decoded again.
			s.CompactCall(got.ToolCallId)
			c.Forget(got.ToolCallId)
		}
	}
}

// applyBoth previews (an update) and applies o, the ith op, on a and on
// b, and fails the test unless both give the same; how names b's side in
// the failure. It returns each one's result, and their error.
func applyBoth(t testing.TB, i int, o op, a, b *merge.State, how string) (gotA, gotB *acpv2.ToolCall, err error) {
	t.Helper()
	if o.u != nil {
		p1, err1 := a.Preview(o.u)
		p2, err2 := b.Preview(o.u)
		if !errors.Is(err1, err2) || !proto.Equal(p1, p2) {
			t.Fatalf("op %d %v: Preview %v, %v; %s %v, %v", i, o, p1, err1, how, p2, err2)
		}
	}
	gotA, err = apply(a, o)
	gotB, errB := apply(b, o)
	if !errors.Is(err, errB) || !proto.Equal(gotA, gotB) {
		t.Fatalf("op %d %v: %v, %v; %s %v, %v", i, o, gotA, err, how, gotB, errB)
	}
	return gotA, gotB, err
}

// checkCompactCall applies ops to two States, one of which compacts the
// call each op touched right after it (half the time once an encoding of
// it is recorded, as a session compacts a call that finished), and checks that
// both give equal results, Previews and Snapshots throughout. It compares
// Snapshots, not Gets: a Get would expand the call again, and the next op
// would not find it compacted.
func checkCompactCall(t testing.TB, ops []op) {
	t.Helper()
	plain, compacted := merge.New(), merge.New()
	for i, o := range ops {
		_, got2, err := applyBoth(t, i, o, plain, compacted, "with compacted calls")
		if err != nil {
			continue
		}
		if i%2 == 0 {
			b, err := proto.Marshal(got2)
			if err != nil {
				t.Fatal(err)
			}
			compacted.Encoded(got2, b)
		}
		if i%3 != 2 {
			// Not after every op: a call encoded at one op and changed
			// at the next is compacted with an encoding of an earlier
			// version at hand.
			compacted.CompactCall(got2.ToolCallId)
		}
		compacted.CompactCall("no such call") // nothing happens
		if !equalCalls(compacted.Snapshot(), plain.Snapshot()) || compacted.Len() != plain.Len() {
			t.Fatalf("op %d: Snapshot after CompactCall differs:\n got: %v\nwant: %v", i, compacted.Snapshot(), plain.Snapshot())
		}
	}
	// The compacted calls were left compacted: each Snapshot decodes them
	// afresh.
	if first := compacted.Snapshot(); len(first) > 0 {
		compacted.CompactCall(first[len(first)-1].ToolCallId)
	}
	if first, second := compacted.Snapshot(), compacted.Snapshot(); len(first) > 0 && first[len(first)-1] == second[len(second)-1] {
		t.Fatal("a call was not left compacted")
	}
}

// opParts returns the parts of o's update or chunk, from its encoding.
func opParts(t testing.TB, o op) *encoded.Parts {
	t.Helper()
	if o.u != nil {
		wire, err := proto.Marshal(o.u)
		if err != nil {
			t.Fatal(err)
		}
		return encoded.UpdateParts(o.u, wire)
	}
	wire, err := proto.Marshal(o.c)
	if err != nil {
		t.Fatal(err)
	}
	return encoded.ChunkParts(o.c, wire)
}

const propertySeqs = 400

// forEachSeed runs f in a parallel subtest per seed, with a generator of
// its own stream.
func forEachSeed(t *testing.T, stream uint64, f func(t *testing.T, r *rand.Rand)) {
	t.Parallel()
	for seed := range uint64(propertySeqs) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			f(t, rand.New(rand.NewPCG(seed, stream)))
		})
	}
}

func TestPropertyReplay(t *testing.T) {
	forEachSeed(t, 1, func(t *testing.T, r *rand.Rand) { checkSequence(t, randomOps(r)) })
}

func TestPropertyIdempotentUpdate(t *testing.T) {
	forEachSeed(t, 2, func(t *testing.T, r *rand.Rand) {
		s := merge.New()
		for _, o := range randomOps(r) {
			_, _ = apply(s, o)
		}
		g := &gen{src: r, nIDs: 6} // may hit an unseen id
		u := g.update(fmt.Sprintf("call_%d", r.IntN(6)))

		once := merge.Restore(s.Snapshot())
		got1, err := once.ApplyUpdate(u)
		if err != nil {
			t.Fatal(err)
		}
		twice := merge.Restore(s.Snapshot())
		_, _ = twice.ApplyUpdate(u)
		got2, err := twice.ApplyUpdate(u)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got1, got2) {
			t.Fatalf("update %v:%s", u, diff(got1, got2))
		}
		if !equalCalls(once.Snapshot(), twice.Snapshot()) {
			t.Fatalf("update %v: snapshots differ", u)
		}
	})
}

func TestPropertyCompact(t *testing.T) {
	forEachSeed(t, 4, func(t *testing.T, r *rand.Rand) { checkCompact(t, randomOps(r), 1+r.IntN(5)) })
}

func TestPropertyCompactCall(t *testing.T) {
	forEachSeed(t, 6, func(t *testing.T, r *rand.Rand) { checkCompactCall(t, randomOps(r)) })
}

func TestPropertyWire(t *testing.T) {
	forEachSeed(t, 5, func(t *testing.T, r *rand.Rand) { checkWire(t, randomOps(r), 1+r.IntN(8)) })
}

func TestPropertyRestore(t *testing.T) {
	forEachSeed(t, 3, func(t *testing.T, r *rand.Rand) {
		ops := randomOps(r)
		checkRestore(t, ops, r.IntN(len(ops)+1))
	})
}

func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte("chunks and updates over several tool call ids, interleaved"))
	seed := make([]byte, 512)
	r := rand.New(rand.NewPCG(42, 42))
	for i := range seed {
		seed[i] = byte(r.IntN(256))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := fuzzOps(data)
		checkSequence(t, ops)
		checkRestore(t, ops, len(ops)/2)
		checkCompact(t, ops, 3)
		checkWire(t, ops, 5)
	})
}
