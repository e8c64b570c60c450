package encoded_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// randomText returns up to n bytes of text with characters JSON escapes.
func randomText(r *rand.Rand, n int) string {
	runes := []rune("ab \"\\\n\t\x01/é日😀")
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// randomUpdates returns the updates of a few tool calls, interleaved: each
// a variant of ToolCallUpdate or ToolCallContentChunk (between them every
// field of every kind, protofill.Variants), a chunk of random text, or a
// new status.
func randomUpdates(r *rand.Rand, n int) []*acpv2.SessionUpdate {
	var variants []proto.Message
	variants = append(variants, protofill.Variants(&acpv2.ToolCallUpdate{})...)
	variants = append(variants, protofill.Variants(&acpv2.ToolCallContentChunk{})...)
	var out []*acpv2.SessionUpdate
	for range n {
		id := fmt.Sprint("call_", r.IntN(3))
		var u *acpv2.SessionUpdate
		switch r.IntN(3) {
		case 0:
			switch v := proto.Clone(variants[r.IntN(len(variants))]).(type) {
			case *acpv2.ToolCallUpdate:
				v.ToolCallId = id
				u = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: v}}
			case *acpv2.ToolCallContentChunk:
				v.ToolCallId = id
				if v.Content == nil {
					v.Content = textItem("")
				}
				u = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: v}}
			}
		case 1:
			u = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{
				ToolCallId: id, Content: textItem(randomText(r, r.IntN(200)))}}}
		default:
			u = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{
				ToolCallId: id, Status: strVal(randomText(r, 8))}}}
		}
		out = append(out, u)
	}
	return out
}

// mergedEvents returns the events the session makes of updates: each
// update's, then its merged call's, with the bodies Calls.Body makes from
// the version before and the update's parts, numbered.
func mergedEvents(t *testing.T, updates []*acpv2.SessionUpdate) []*encoded.Event {
	t.Helper()
	s, calls := merge.New(), &encoded.Calls{}
	var events []*acpv2.SessionEvent
	var bodies []encoded.Body
	for _, u := range updates {
		var ev *acpv2.SessionEvent
		var tc *acpv2.ToolCall
		var err error
		if c := u.GetToolCallContentChunk(); c != nil {
			ev = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCallContentChunk{ToolCallContentChunk: c}}
			tc, err = s.ApplyChunk(c)
		} else {
			ev = &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: u.GetToolCallUpdate()}}
			tc, err = s.ApplyUpdate(u.GetToolCallUpdate())
		}
		if err != nil {
			t.Fatal(err)
		}
		bd := encoded.BodyOf(ev)
		var parts *encoded.Parts
		if c := u.GetToolCallContentChunk(); c != nil {
			parts = encoded.ChunkParts(c, bd.Bytes())
		} else {
			parts = encoded.UpdateParts(u.GetToolCallUpdate(), bd.Bytes())
		}
		events = append(events, ev, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: tc}})
		bodies = append(bodies, bd, calls.Body(tc, parts))
	}
	for i, ev := range events {
		ev.Seq = uint64(i + 1)
	}
	encs, _, err := encoded.Numbered(events, bodies)
	if err != nil {
		t.Fatal(err)
	}
	return encs
}

// The JSON of the events of merged tool calls, each made from the parts
// of the versions made before, as AppendJSON appends it and JSON returns
// it, is eventjson.Marshal's for the event's message, byte for byte: for tool calls of every field (protofill) and
// random text, several interleaved, whose events' JSON is asked for in
// any order, by several streams at once.
func TestMergedCallJSONIsMarshal(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		r := rand.New(rand.NewPCG(uint64(round), 25))
		events := mergedEvents(t, randomUpdates(r, 150))
		order := r.Perm(len(events))
		if round%2 == 0 {
			// In order, as one stream reads them: each version reuses the
			// parts of the one before.
			for i := range order {
				order[i] = i
			}
		}
		const streams = 4
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for s := range streams {
			wg.Go(func() {
				for _, i := range order[s*len(order)/streams : (s+1)*len(order)/streams] {
					ev := events[i]
					msg, err := ev.Message()
					if err != nil {
						errs <- err
						return
					}
					want, wantErr := eventjson.Marshal(msg)
					got, err := ev.AppendJSON([]byte("frame "))
					if fmt.Sprint(err) != fmt.Sprint(wantErr) || wantErr == nil && !bytes.Equal(got, append([]byte("frame "), want...)) {
						errs <- fmt.Errorf("round %d, event %d: AppendJSON %s (%v), eventjson.Marshal %s (%v)", round, ev.Seq(), got, err, want, wantErr)
						return
					}
					if got, err := ev.JSON(); fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("round %d, event %d: JSON %s (%v), eventjson.Marshal %s (%v)", round, ev.Seq(), got, err, want, wantErr)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
