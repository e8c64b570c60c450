package acpjson

import (
	"encoding/json"
	"hash/maphash"
	"iter"
	"maps"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// The codec walks JSON in the generic form encoding/json gives with
// UseNumber: map[string]any, []any, string, json.Number, bool and nil.
// parser builds that form in one pass over the bytes, about two and a half
// times as fast as encoding/json's Decoder, which scans each value twice and
// allocates a reader, a decoder and its buffer per call (a session/update
// line with a tool-call update, go1.26 on amd64: 2.4 µs and 38 allocations
// against 6.3 µs and 90).
//
// It is an accelerator, not a second definition of JSON: it gives up (ok
// false) on anything it is not sure of, invalid JSON above all, and the
// caller then asks encoding/json, whose answer and error message stand. What
// it does accept it decodes exactly as encoding/json does, down to invalid
// UTF-8 and lone surrogates becoming U+FFFD and the last of duplicate
// members winning (FuzzParse checks this against encoding/json).

// MaxDepth bounds the nesting of arrays and objects in one JSON document
// that the decoders take: an update (the update object itself is level
// 1), a permission request's params, a config option answer. A deeper
// document is refused, as bad agent output is: DecodeUpdate fails
// (DecodeNotification leaves such an update to it), and KeepUnknown keeps
// what lies deeper than MaxDepth as JSON text. Every level becomes up to three levels of
// protobuf messages once decoded (a google.protobuf.Value, its Struct and
// the Struct's map entry), and a stored event sits a few more below its
// SessionEvent, so the cap keeps every stored event some hundreds of
// levels deep at most: far under protobuf-go's RecursionLimit of 10000,
// which a stored event deeper than that could never be decoded again
// with. (encoding/json alone takes 10000 levels of JSON.)
const MaxDepth = 64

type parser struct {
	data  []byte
	i     int
	depth int
	// limit is the depth the parser gives up beyond: MaxDepth, or for
	// the update of a notification MaxDepth below the update's parent.
	// Deeper documents go to encoding/json, which words the refusal.
	limit int
	// elems holds the elements of the arrays being parsed, innermost last.
	elems []any
	// buf holds a string being unescaped.
	buf []byte
	// vals holds the elements of the google.protobuf lists being parsed
	// (see protoValue), innermost last.
	vals []*structpb.Value
	// names holds member names not in keyNames, by a hash of their bytes:
	// those of _meta and rawInput objects recur from line to line.
	names [64]string
}

// nameSeed seeds the hash of parser.names.
var nameSeed = maphash.MakeSeed()

// name returns b as a string, the one parsed before when it is in p.names.
func (p *parser) name(b []byte) string {
	if len(b) > maxInterned {
		return string(b)
	}
	slot := &p.names[maphash.Bytes(nameSeed, b)%uint64(len(p.names))]
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}

// parsers keeps parsers with their grown elems and buf: without it, a
// turn of updates (BenchmarkDecodeMergeTurn1000) makes a tenth more
// allocations, most of them buffers for text with escapes.
var parsers = sync.Pool{New: func() any { return new(parser) }}

func getParser(data []byte) *parser {
	p := parsers.Get().(*parser)
	p.data, p.i, p.depth, p.limit = data, 0, 0, MaxDepth
	return p
}

func putParser(p *parser) {
	p.data = nil
	if cap(p.elems) > 1024 || cap(p.vals) > 1024 || cap(p.buf) > 64<<10 {
		return // do not keep what one large document grew
	}
	parsers.Put(p)
}

// parseFast parses data, which must hold one JSON value and nothing but
// whitespace around it. ok is false when it does not, or when the parser
// gives up; see parser.
func parseFast(data []byte) (v any, ok bool) {
	p := getParser(data)
	v, ok = p.value()
	if ok {
		p.ws()
		ok = p.i == len(p.data)
	}
	putParser(p)
	if !ok {
		return nil, false
	}
	return v, true
}

func (p *parser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value parses the value at p.i, after optional whitespace.
func (p *parser) value() (any, bool) {
	p.ws()
	if p.i >= len(p.data) {
		return nil, false
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.stringValue()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return nil, false
}

func (p *parser) literal(lit string) bool {
	if len(p.data)-p.i < len(lit) || string(p.data[p.i:p.i+len(lit)]) != lit {
		return false
	}
	p.i += len(lit)
	return true
}

// number parses a number as json.Number.
func (p *parser) number() (any, bool) {
	n, ok := p.numberBytes()
	if !ok {
		return nil, false
	}
	if len(n) == 1 {
		return smallNumbers[n[0]-'0'], true
	}
	return json.Number(n), true
}

// numberBytes parses a number, following JSON's grammar, and returns its
// text: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) numberBytes() ([]byte, bool) {
	d, start := p.data, p.i
	j := start
	if d[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(d) && '0' <= d[j] && d[j] <= '9' {
			j++
		}
		return j > k
	}
	switch {
	case j < len(d) && d[j] == '0':
		j++
	case !digits():
		return nil, false
	}
	if j < len(d) && d[j] == '.' {
		j++
		if !digits() {
			return nil, false
		}
	}
	if j < len(d) && (d[j] == 'e' || d[j] == 'E') {
		j++
		if j < len(d) && (d[j] == '+' || d[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
	}
	p.i = j
	return d[start:j], true
}

// smallNumbers are the one-digit numbers, boxed once.
var smallNumbers = func() (n [10]any) {
	for i := range n {
		n[i] = json.Number(strconv.Itoa(i))
	}
	return n
}()

func (p *parser) object() (any, bool) {
	m := make(map[string]any)
	ok := p.members(func(k string) bool {
		v, ok := p.value()
		m[k] = v
		return ok
	})
	if !ok {
		return nil, false
	}
	return m, true
}

// members parses the object at p.i, after optional whitespace, calling
// member with the name of each of its members in turn; member parses the
// value, which follows at p.i, and reports whether to go on.
func (p *parser) members(member func(key string) bool) bool {
	p.ws()
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return false
	}
	if p.depth++; p.depth > p.limit {
		return false
	}
	p.i++ // {
	p.ws()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		p.depth--
		return true
	}
	for {
		k, ok := p.key()
		if !ok || !member(k) {
			return false
		}
		end, ok := p.next('}')
		if !ok {
			return false
		}
		if end {
			p.depth--
			return true
		}
	}
}

// key parses an object's member name and the colon after it, with the
// whitespace around them.
func (p *parser) key() (string, bool) {
	p.ws()
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return "", false
	}
	b, ok := p.str()
	if !ok {
		return "", false
	}
	k, known := keyNames[string(b)]
	if !known {
		k = p.name(b)
	}
	p.ws()
	if p.i >= len(p.data) || p.data[p.i] != ':' {
		return "", false
	}
	p.i++
	return k, true
}

// next consumes the whitespace and the comma or the closing bracket after a
// member or element; end reports the bracket.
func (p *parser) next(closing byte) (end, ok bool) {
	p.ws()
	if p.i >= len(p.data) {
		return false, false
	}
	switch p.data[p.i] {
	case ',':
		p.i++
		return false, true
	case closing:
		p.i++
		return true, true
	}
	return false, false
}

func (p *parser) array() (any, bool) {
	if p.depth++; p.depth > p.limit {
		return nil, false
	}
	p.i++ // [
	p.ws()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		p.depth--
		return []any{}, true
	}
	base := len(p.elems)
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		p.elems = append(p.elems, v)
		end, ok := p.next(']')
		if !ok {
			return nil, false
		}
		if end {
			break
		}
	}
	arr := make([]any, len(p.elems)-base)
	copy(arr, p.elems[base:])
	clear(p.elems[base:])
	p.elems = p.elems[:base]
	p.depth--
	return arr, true
}

func (p *parser) stringValue() (any, bool) {
	b, ok := p.str()
	if !ok {
		return nil, false
	}
	if len(b) <= maxInterned {
		if v, known := valueNames[string(b)]; known {
			return v, true
		}
	}
	return string(b), true
}

// text parses the string at p.i as stringValue does, into a string rather
// than an interface, which takes an allocation of its own.
func (p *parser) text() (string, bool) {
	b, ok := p.str()
	if !ok {
		return "", false
	}
	if len(b) <= maxInterned {
		if v, known := valueNames[string(b)]; known {
			return v.(string), true
		}
	}
	return string(b), true
}

// str parses the string at p.i, which is a quote. The bytes it returns are
// valid until the next call.
func (p *parser) str() ([]byte, bool) {
	d := p.data
	start := p.i + 1
	for j := start; j < len(d); j++ {
		switch c := d[j]; {
		case c == '"':
			p.i = j + 1
			return d[start:j], true
		case !plainByte(c):
			return p.strSlow(start, j)
		}
	}
	return nil, false
}

// strSlow unescapes a string that has escapes or bytes beyond ASCII: d[start:j]
// is plain ASCII. Invalid UTF-8 bytes and unpaired surrogate escapes become
// U+FFFD, as in encoding/json.
func (p *parser) strSlow(start, j int) ([]byte, bool) {
	d := p.data
	b := append(p.buf[:0], d[start:j]...)
	for j < len(d) {
		c := d[j]
		switch {
		case c == '"':
			p.buf = b
			p.i = j + 1
			return b, true
		case c < ' ':
			return nil, false
		case c == '\\':
			if j+1 >= len(d) {
				return nil, false
			}
			switch e := d[j+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(d[j+2:])
				if r < 0 {
					return nil, false
				}
				j += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(d)-j >= 6 && d[j] == '\\' && d[j+1] == 'u' {
						r2 = hex4(d[j+2:])
					}
					if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
						b = utf8.AppendRune(b, pair)
						j += 6
						continue
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return nil, false
			}
			j += 2
		case c < utf8.RuneSelf:
			// The run of bytes that need nothing, in one append: text
			// with escapes (code, above all) is mostly such runs.
			k := j + 1
			for k < len(d) && plainByte(d[k]) {
				k++
			}
			b = append(b, d[j:k]...)
			j = k
		default:
			r, size := utf8.DecodeRune(d[j:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, d[j:j+size]...)
			}
			j += size
		}
	}
	return nil, false
}

// plainByte reports whether c stands for itself in a JSON string: ASCII,
// neither a control character, a quote nor a backslash.
func plainByte(c byte) bool { return c >= ' ' && c < utf8.RuneSelf && c != '"' && c != '\\' }

// hex4 decodes the four hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Interning: the member names ACP defines, and short values that recur in
// every update (discriminators, statuses, kinds), are parsed into strings
// allocated once, and values into interfaces boxed once. That saves over a
// quarter of the allocations of decoding a session/update line with a
// tool-call update (DecodeNotification), and over half for a message chunk.
const maxInterned = 32

var (
	keyNames   = map[string]string{}
	valueNames = map[string]any{}
)

// internNames fills keyNames and valueNames; schema.go's init calls it once
// infos is complete.
func internNames() {
	for _, in := range infos {
		for k := range in.byKey {
			keyNames[k] = k
		}
		if in.union != nil {
			keyNames[in.union.key] = in.union.key
			for tag, v := range in.union.byTag {
				valueNames[tag] = tag
				if v.nested != "" {
					keyNames[v.nested] = v.nested
				}
			}
		}
	}
	for tag := range updateTags {
		valueNames[tag] = tag
	}
	for _, k := range []string{
		// The draft dialect, and the JSON-RPC envelope.
		"sessionUpdate", "type", "toolCall", "id", "location", "toolCallContent", "usage", "sessionInfo", "name",
		"jsonrpc", "method", "params", "sessionId", "update",
	} {
		keyNames[k] = k
	}
	// The wire strings of ACP's enums: tool kinds and statuses (which plan
	// entries share), stop reasons, permission option kinds.
	for _, wires := range []iter.Seq[string]{
		maps.Keys(toolKinds.known), maps.Keys(toolCallStatuses.known),
		maps.Keys(stopReasons.known), maps.Keys(permissionOptionKinds.known),
	} {
		for w := range wires {
			valueNames[w] = w
		}
	}
	for _, v := range []string{
		"tool_call", "2.0", "session/update",
		// Plan entry priorities, roles, turn states.
		"high", "medium", "low", "user", "assistant", "idle", "running",
		"text/plain", "",
	} {
		valueNames[v] = v
	}
	for k, v := range draftKinds {
		valueNames[k], valueNames[v] = k, v
	}
}
