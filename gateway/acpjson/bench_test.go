package acpjson_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/internal/bench"
)

// A realistic tool-call patch: status change with a diff and a location.
var benchUpdate = []byte(`{"sessionUpdate":"tool_call_update","toolCallId":"call_042","status":"completed",` +
	`"content":[{"type":"diff","path":"/home/user/project/src/config.json","oldText":"{\n  \"debug\": false\n}","newText":"{\n  \"debug\": true\n}"},` +
	`{"type":"content","content":{"type":"text","text":"Updated configuration: debug mode is now enabled for local runs."}}],` +
	`"locations":[{"path":"/home/user/project/src/config.json","line":2}],"rawOutput":{"ok":true,"bytes":27}}`)

func BenchmarkDecodeUpdate(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchUpdate)))
	for b.Loop() {
		if _, err := acpjson.DecodeUpdate(benchUpdate, acpjson.V2); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeNotification decodes the same update inside its
// session/update notification, as the agent's read loop does with each line.
func BenchmarkDecodeNotification(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_1","update":` + string(benchUpdate) + `}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if n, ok := acpjson.DecodeNotification(line, acpjson.V2); !ok || n.Err != nil {
			b.Fatal(ok, n.Err)
		}
	}
}

func BenchmarkEncodeUpdateV2(b *testing.B) {
	u, err := acpjson.DecodeUpdate(benchUpdate, acpjson.V2)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := acpjson.EncodeUpdate(u, acpjson.V2); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeMerge is the agent-output hot path for one update: decode
// the agent's JSON, then merge it into the session's tool-call state.
func BenchmarkDecodeMerge(b *testing.B) {
	s := merge.New()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchUpdate)))
	for b.Loop() {
		u, err := acpjson.DecodeUpdate(benchUpdate, acpjson.V2)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ApplyUpdate(u.GetToolCallUpdate()); err != nil {
			b.Fatal(err)
		}
	}
}

// turn1000 is a 1,000-update turn: 100 tool calls, each created (v1
// tool_call), streamed into with 8 content chunks, and completed.
func turn1000() [][]byte {
	var lines [][]byte
	for i := 0; i < 100; i++ {
		id := fmt.Sprintf("call_%03d", i)
		lines = append(lines, []byte(`{"sessionUpdate":"tool_call","toolCallId":"`+id+`","title":"Run step `+id+`","kind":"execute","status":"pending","rawInput":{"command":"go test ./..."}}`))
		for c := 0; c < 8; c++ {
			lines = append(lines, []byte(fmt.Sprintf(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"%s","content":{"type":"content","content":{"type":"text","text":"ok  \tpkg/%d\t0.%03ds\n"}}}`, id, c, c)))
		}
		lines = append(lines, benchUpdateFor(id))
	}
	return lines
}

func benchUpdateFor(id string) []byte {
	return []byte(`{"sessionUpdate":"tool_call_update","toolCallId":"` + id + `","status":"completed","locations":[{"path":"/w/main.go","line":1}]}`)
}

func BenchmarkDecodeMergeTurn1000(b *testing.B) {
	lines := turn1000()
	var size int64
	for _, l := range lines {
		size += int64(len(l))
	}
	b.ReportAllocs()
	b.SetBytes(size)
	for b.Loop() {
		s := merge.New()
		for _, l := range lines {
			u, err := acpjson.DecodeUpdate(l, acpjson.V2)
			if err != nil {
				b.Fatal(err)
			}
			if c := u.GetToolCallContentChunk(); c != nil {
				_, err = s.ApplyChunk(c)
			} else {
				_, err = s.ApplyUpdate(u.GetToolCallUpdate())
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if s.Len() != 100 {
			b.Fatalf("%d tool calls, want 100", s.Len())
		}
	}
}

// benchAgentLines returns the session/update lines of a 20-update turn
// (two tool calls' lives) of the bench agent (internal/bench) speaking ACP
// protocol version v, as the gateway reads them.
func benchAgentLines(b *testing.B, v int) [][]byte {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- bench.ServeAgent(context.Background(), inR, outW, v)
		outW.Close()
	}()
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`+"\n"+
			`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{}}`+"\n"+
			`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"bench-session-1","prompt":[{"type":"text","text":"{\"updates\":20}"}]}}`+"\n")
	}()
	var lines [][]byte
	sc := bufio.NewScanner(outR)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"id":3`)) {
			break
		}
		if bytes.Contains(line, []byte(`"session/update"`)) && !bytes.Contains(line, []byte(`"state_update"`)) {
			lines = append(lines, bytes.Clone(line))
		}
	}
	inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if len(lines) != 20 {
		b.Fatalf("the bench agent sent %d updates, want 20", len(lines))
	}
	return lines
}

// BenchmarkDecodeBenchAgent decodes the bench agent's session/update
// lines, as the gateway's read loop does; an op is one line.
func BenchmarkDecodeBenchAgent(b *testing.B) {
	for _, v := range []int{1, 2} {
		b.Run(fmt.Sprintf("v%d", v), func(b *testing.B) {
			lines := benchAgentLines(b, v)
			var size int64
			for _, l := range lines {
				size += int64(len(l))
			}
			b.ReportAllocs()
			b.SetBytes(size / int64(len(lines)))
			i := 0
			for b.Loop() {
				n, ok := acpjson.DecodeNotification(lines[i], acpjson.Version(v))
				if !ok || n.Err != nil || n.Update.GetUnknown() != nil {
					b.Fatalf("%v %v: %s", ok, n.Err, lines[i])
				}
				if i++; i == len(lines) {
					i = 0
				}
			}
		})
	}
}
