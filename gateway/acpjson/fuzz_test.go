package acpjson_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// FuzzDecodeUpdate feeds arbitrary agent output to the decoder. It must
// never panic; whatever it accepts must encode to valid JSON, and that JSON
// must be a fixed point of decode-then-encode, in v2 and in v1.
func FuzzDecodeUpdate(f *testing.F) {
	for _, c := range loadGolden(f) {
		f.Add([]byte(c.Input), uint8(c.Version))
	}
	f.Add([]byte(`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"resource","resource":{"blob":"x"}}}]}`), uint8(2))
	f.Add([]byte(`{"type":"tool_call","toolCall":{"id":"x","location":5}}`), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		v := acpjson.Version(1 + ver%2)
		u, err := acpjson.DecodeUpdate(data, v)
		if err != nil {
			return
		}
		out, err := acpjson.EncodeUpdate(u, acpjson.V2)
		if err != nil {
			t.Fatalf("encode of a decoded update failed: %v\ninput: %s", err, data)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %s\ninput: %s", out, data)
		}
		u2, err := acpjson.DecodeUpdate(out, acpjson.V2)
		if err != nil {
			t.Fatalf("re-decode: %v\nencoded: %s\ninput: %s", err, out, data)
		}
		out2, err := acpjson.EncodeUpdate(u2, acpjson.V2)
		if err != nil {
			t.Fatal(err)
		}
		if !testutil.JSONEqual(t, out, out2) {
			t.Fatalf("not a fixed point\nfirst:  %s\nsecond: %s\ninput: %s", out, out2, data)
		}
		if v1, err := acpjson.EncodeUpdate(u, acpjson.V1); err == nil && !json.Valid(v1) {
			t.Fatalf("invalid v1 JSON %s", v1)
		}
	})
}

// TestV2RoundTripProperty checks on generated well-formed v2 updates that
// v2 JSON -> proto -> v2 JSON is lossless.
func TestV2RoundTripProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		upd := genUpdate(r)
		in, err := json.Marshal(upd)
		if err != nil {
			t.Fatal(err)
		}
		u, err := acpjson.DecodeUpdate(in, acpjson.V2)
		if err != nil {
			t.Fatalf("decode %s: %v", in, err)
		}
		out, err := acpjson.EncodeUpdate(u, acpjson.V2)
		if err != nil {
			t.Fatalf("encode %s: %v", in, err)
		}
		if !testutil.JSONEqual(t, in, out) {
			t.Fatalf("lossy round trip\n in: %s\nout: %s", in, out)
		}
	}
}

func genUpdate(r *rand.Rand) map[string]any {
	switch r.IntN(4) {
	case 0:
		return map[string]any{"sessionUpdate": "tool_call_content_chunk", "toolCallId": genID(r), "content": genItem(r)}
	case 1:
		return map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": genID(r), "content": genBlock(r)}
	}
	u := map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": genID(r)}
	tri := func(key string, value func() any) {
		switch r.IntN(3) {
		case 1:
			u[key] = nil
		case 2:
			u[key] = value()
		}
	}
	tri("title", func() any { return genText(r) })
	tri("kind", func() any { return pick(r, "read", "edit", "execute", "_custom", "future_kind") })
	tri("status", func() any { return pick(r, "pending", "in_progress", "completed", "failed", "_x") })
	tri("content", func() any {
		items := []any{}
		for n := r.IntN(4); n > 0; n-- {
			items = append(items, genItem(r))
		}
		return items
	})
	tri("locations", func() any {
		locs := []any{}
		for n := r.IntN(3); n > 0; n-- {
			l := map[string]any{"path": "/w/" + genText(r)}
			if r.IntN(2) == 0 {
				l["line"] = r.IntN(1000)
			}
			locs = append(locs, l)
		}
		return locs
	})
	tri("rawInput", func() any { return genJSON(r, 3) })
	tri("rawOutput", func() any { return genJSON(r, 3) })
	tri("_meta", func() any { return map[string]any{"k": genJSON(r, 2)} })
	if r.IntN(4) == 0 {
		u["_future_member"] = genJSON(r, 2)
	}
	return u
}

func genItem(r *rand.Rand) map[string]any {
	var it map[string]any
	switch r.IntN(4) {
	case 0:
		it = map[string]any{"type": "content", "content": genBlock(r)}
	case 1:
		it = map[string]any{"type": "diff", "path": "/w/f.go", "newText": genText(r)}
		if r.IntN(2) == 0 {
			it["oldText"] = genText(r)
		}
	case 2:
		it = map[string]any{"type": "terminal", "terminalId": genID(r)}
	default:
		it = map[string]any{"type": "_gallery", "payload": genJSON(r, 2)}
	}
	if r.IntN(5) == 0 {
		it["_meta"] = map[string]any{"m": genText(r)}
	}
	return it
}

func genBlock(r *rand.Rand) map[string]any {
	switch r.IntN(3) {
	case 0:
		return map[string]any{"type": "image", "data": "AAAA", "mimeType": "image/png"}
	case 1:
		return map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///a", "text": genText(r)}}
	}
	return map[string]any{"type": "text", "text": genText(r)}
}

func genJSON(r *rand.Rand, depth int) any {
	n := r.IntN(7)
	if depth == 0 && n >= 5 {
		n = 0
	}
	switch n {
	case 0:
		return genText(r)
	case 1:
		return float64(r.IntN(1 << 20))
	case 2:
		return r.Float64()
	case 3:
		return r.IntN(2) == 0
	case 4:
		return nil
	case 5:
		l := []any{}
		for k := r.IntN(3); k > 0; k-- {
			l = append(l, genJSON(r, depth-1))
		}
		return l
	}
	m := map[string]any{}
	for k := r.IntN(3); k > 0; k-- {
		m[genText(r)] = genJSON(r, depth-1)
	}
	return m
}

func genID(r *rand.Rand) string { return fmt.Sprintf("call_%d", r.IntN(5)) }

func genText(r *rand.Rand) string {
	return pick(r, "", "a", "hello world", "quote\" back\\slash", "line\nbreak\ttab", "ünïcödé 日本 😀", "\u0001ctl")
}

func pick(r *rand.Rand, s ...string) string { return s[r.IntN(len(s))] }
