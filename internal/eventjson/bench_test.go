package eventjson

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// benchText returns n bytes of code-like text with characters JSON
// escapes, JSON-quoted, as the bench's agent sends.
func benchText(n int) string {
	const sample = "\tif err := run(ctx, cfg); err != nil {\n\t\treturn fmt.Errorf(\"step %d: %w\", i, err)\n\t}\n" +
		"// Package config loads the settings.\nfunc Load(path string) (*Config, error) {\n\tb, err := os.ReadFile(path)\n"
	b, _ := json.Marshal(strings.Repeat(sample, n/len(sample)+1)[:n])
	return string(b)
}

// benchEvents are the events of the bench's default workload (payload
// 256): a tool call as merged at its end, and a message chunk.
func benchEvents(b *testing.B) map[string]*acpv2.SessionEvent {
	path := `"/home/dev/project/internal/config/call_7.go"`
	meta := `"meta":{"bench":{"n":1234,"t":"1767225600123456789"}}`
	js := map[string]string{
		"toolcall": `{"seq":"1234","time":"2026-01-01T00:00:00.123456789Z","toolCall":{"toolCallId":"call_7","title":"Edit internal/config/call_7.go","kind":"edit","status":"completed",` +
			`"content":[{"content":{"text":{"text":` + benchText(256) + `}}},{"diff":{"path":` + path + `,"oldText":` + benchText(1024) + `,"newText":` + benchText(1024) + `}}],` +
			`"locations":[{"path":` + path + `,"line":42}],` +
			`"rawInput":{"file_path":` + path + `,"old_string":` + benchText(128) + `,"new_string":` + benchText(128) + `},` +
			`"rawOutput":{"ok":true,"linesChanged":12},` + meta + `}}`,
		"chunk": `{"seq":"1235","time":"2026-01-01T00:00:00.124Z","agentMessageChunk":{"content":{"text":{"text":` + benchText(64) + `}},` + meta + `}}`,
	}
	events := map[string]*acpv2.SessionEvent{}
	for name, j := range js {
		ev := &acpv2.SessionEvent{}
		if err := protojson.Unmarshal([]byte(j), ev); err != nil {
			b.Fatal(err)
		}
		events[name] = ev
	}
	return events
}

// BenchmarkMarshal compares protojson and this package on the bench's
// events.
func BenchmarkMarshal(b *testing.B) {
	marshal := map[string]func(proto.Message) ([]byte, error){
		"protojson": protojson.MarshalOptions{}.Marshal,
		"eventjson": Marshal,
	}
	events := benchEvents(b)
	for _, ev := range []string{"toolcall", "chunk"} {
		for _, enc := range []string{"protojson", "eventjson"} {
			b.Run(ev+"/"+enc, func(b *testing.B) {
				b.ReportAllocs()
				m, f := events[ev], marshal[enc]
				for b.Loop() {
					if _, err := f(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
