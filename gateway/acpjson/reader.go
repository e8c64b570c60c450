package acpjson

import (
	"bytes"
	"errors"
	"hash/maphash"
	"iter"
	"maps"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects in one JSON document
// that the decoders take: an update (the update object itself is level
// 1), a permission request's params, a config option answer. A deeper
// document is refused, as bad agent output is: DecodeUpdate fails
// (DecodeNotification leaves such an update to it), and KeepUnknown keeps
// what lies deeper than MaxDepth as JSON text. Every level becomes up to
// three levels of protobuf messages once decoded (a google.protobuf.Value,
// its Struct and the Struct's map entry), and a stored event sits a few
// more below its SessionEvent, so the cap keeps every stored event some
// hundreds of levels deep at most: far under protobuf-go's RecursionLimit
// of 10000, which a stored event deeper than that could never be decoded
// again with. (encoding/json alone takes 10000 levels of JSON.)
const MaxDepth = 64

// reader reads one JSON document token by token, validating it as it
// goes: every value the decoder reads is a slice of the document, so that a
// member whose value the decoder could not use is decoded again from its
// bytes. It reads JSON as encoding/json does: invalid UTF-8 and lone
// surrogates become U+FFFD, and a member given twice is read twice, the
// decoder keeping the last. What it refuses, encoding/json refuses too
// (FuzzDecoderMatchesOracle); the error then returned is encoding/json's
// (docError).
type reader struct {
	data []byte
	i    int
	// stack holds the open arrays and objects ('[' or '{'), innermost
	// last, and count the members or elements read in each.
	stack []byte
	count []int
	// afterName is set after a member name: its value comes next.
	afterName bool
	// limit is the depth beyond which the reader refuses the document
	// with errDeep.
	limit int
	// buf holds a string being unescaped.
	buf []byte
	// names holds member names not in keyNames, by a hash of their bytes:
	// those of _meta and rawInput objects recur from line to line.
	names [64]string
}

// readers keeps readers for reuse.
var readers = sync.Pool{New: func() any { return new(reader) }}

// getReader returns a reader of data, taking arrays and objects levels
// deep.
func getReader(data []byte, levels int) *reader {
	r := readers.Get().(*reader)
	r.data, r.i, r.limit, r.afterName = data, 0, levels, false
	r.stack, r.count = r.stack[:0], r.count[:0]
	return r
}

func putReader(r *reader) {
	r.data = nil
	if cap(r.buf) > 64<<10 || cap(r.stack) > 1024 {
		return // do not keep what one large document grew
	}
	readers.Put(r)
}

// errDeep is a document nested deeper than the reader takes; errSyntax one
// that is not JSON. Neither reaches a caller: the document's error is
// worded as encoding/json words it (docError).
var (
	errDeep   = errors.New("acpjson: nested too deep")
	errSyntax = errors.New("acpjson: not JSON")
)

// Kind is the kind of a JSON value, by its first byte: 'n', 't', 'f', '"',
// '0' (a number), '{' or '['; 0 for none.
type Kind byte

func (r *reader) ws() {
	for r.i < len(r.data) {
		switch r.data[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// kind returns the kind of the next value, or 0 when there is none.
func (r *reader) kind() Kind {
	r.ws()
	if r.i >= len(r.data) {
		return 0
	}
	switch c := r.data[r.i]; c {
	case 'n', 't', 'f', '"', '{', '[':
		return Kind(c)
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return '0'
	}
	return 0
}

// depth is the number of arrays and objects the reader is in.
func (r *reader) depth() int { return len(r.stack) }

// offset is the offset after the last token read.
func (r *reader) offset() int { return r.i }

// open reads the '{' or '[' that must come next.
func (r *reader) open() error {
	k := r.kind()
	if k != '{' && k != '[' {
		return errSyntax
	}
	r.i++
	r.afterName = false
	r.stack = append(r.stack, byte(k))
	r.count = append(r.count, 0)
	if len(r.stack) > r.limit {
		return errDeep
	}
	return nil
}

// more reports whether the object or array being read has another
// member or element, reading the comma before it, or its end when not.
func (r *reader) more() (bool, error) {
	r.ws()
	if r.i >= len(r.data) || len(r.stack) == 0 || r.afterName {
		return false, errSyntax
	}
	top := len(r.stack) - 1
	closer := byte('}')
	if r.stack[top] == '[' {
		closer = ']'
	}
	switch c := r.data[r.i]; {
	case c == closer:
		r.i++
		r.stack, r.count = r.stack[:top], r.count[:top]
		return false, nil
	case r.count[top] > 0:
		if c != ',' {
			return false, errSyntax
		}
		r.i++
	}
	r.count[top]++
	return true, nil
}

// name reads a member name and the colon after it. The bytes are valid
// until the next read.
func (r *reader) name() ([]byte, error) {
	if len(r.stack) == 0 || r.stack[len(r.stack)-1] != '{' || r.kind() != '"' {
		return nil, errSyntax
	}
	b, err := r.text()
	if err != nil {
		return nil, err
	}
	r.ws()
	if r.i >= len(r.data) || r.data[r.i] != ':' {
		return nil, errSyntax
	}
	r.i++
	r.afterName = true
	return b, nil
}

// text reads the string at r.i, which is a quote, returning its text. The
// bytes are valid until the next read.
func (r *reader) text() ([]byte, error) {
	d := r.data
	start := r.i + 1
	for j := start; j < len(d); j++ {
		switch c := d[j]; {
		case c == '"':
			r.i = j + 1
			return d[start:j], nil
		case !plainByte(c):
			return r.textSlow(start, j)
		}
	}
	return nil, errSyntax
}

// textSlow reads a string with escapes, control characters or bytes
// beyond ASCII, checking and unescaping it in one pass: d[start:j] is
// plain ASCII. Invalid UTF-8 bytes and unpaired surrogate escapes become
// U+FFFD, as in encoding/json.
func (r *reader) textSlow(start, j int) ([]byte, error) {
	d := r.data
	b := append(r.buf[:0], d[start:j]...)
	for j < len(d) {
		c := d[j]
		switch {
		case c == '"':
			r.buf = b
			r.i = j + 1
			return b, nil
		case c < ' ':
			return nil, errSyntax
		case c == '\\':
			if j+1 >= len(d) {
				return nil, errSyntax
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
				c := hex4(d[j+2:])
				if c < 0 {
					return nil, errSyntax
				}
				j += 6
				if utf16.IsSurrogate(c) {
					c2 := rune(-1)
					if len(d)-j >= 6 && d[j] == '\\' && d[j+1] == 'u' {
						c2 = hex4(d[j+2:])
					}
					if pair := utf16.DecodeRune(c, c2); pair != utf8.RuneError {
						b = utf8.AppendRune(b, pair)
						j += 6
						continue
					}
					c = utf8.RuneError
				}
				b = utf8.AppendRune(b, c)
				continue
			default:
				return nil, errSyntax
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
			c, size := utf8.DecodeRune(d[j:])
			if c == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, d[j:j+size]...)
			}
			j += size
		}
	}
	return nil, errSyntax
}

// str reads a string value.
func (r *reader) str() (string, error) {
	if r.kind() != '"' {
		return "", errSyntax
	}
	b, err := r.text()
	if err != nil {
		return "", err
	}
	r.afterName = false
	if len(b) <= maxInterned {
		if s, ok := valueNames[string(b)]; ok {
			return s, nil
		}
	}
	return string(b), nil
}

// scalar reads a number, true, false or null, returning its bytes.
func (r *reader) scalar() ([]byte, error) {
	start := r.i
	switch r.kind() {
	case 'n':
		return r.literal("null")
	case 't':
		return r.literal("true")
	case 'f':
		return r.literal("false")
	case '0':
		start = r.i
		if !r.number() {
			return nil, errSyntax
		}
		r.afterName = false
		return r.data[start:r.i], nil
	}
	r.i = start
	return nil, errSyntax
}

func (r *reader) literal(lit string) ([]byte, error) {
	if len(r.data)-r.i < len(lit) || string(r.data[r.i:r.i+len(lit)]) != lit {
		return nil, errSyntax
	}
	b := r.data[r.i : r.i+len(lit)]
	r.i += len(lit)
	r.afterName = false
	return b, nil
}

// number reads a number, following JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *reader) number() bool {
	d, j := r.data, r.i
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
		return false
	}
	if j < len(d) && d[j] == '.' {
		j++
		if !digits() {
			return false
		}
	}
	if j < len(d) && (d[j] == 'e' || d[j] == 'E') {
		j++
		if j < len(d) && (d[j] == '+' || d[j] == '-') {
			j++
		}
		if !digits() {
			return false
		}
	}
	r.i = j
	return true
}

// key returns a member name as a string, interned when ACP defines it or
// it was read recently.
func (r *reader) key(b []byte) string {
	if k, ok := keyNames[string(b)]; ok {
		return k
	}
	if len(b) > maxInterned {
		return string(b)
	}
	slot := &r.names[maphash.Bytes(nameSeed, b)%uint64(len(r.names))]
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}

// nameSeed seeds the hash of reader.names.
var nameSeed = maphash.MakeSeed()

// end reports whether nothing but whitespace follows the value read.
func (r *reader) end() bool {
	r.ws()
	return r.i == len(r.data) && len(r.stack) == 0
}

// skip reads the next value, whatever it is, refusing it when it nests
// beyond the reader's limit.
func (r *reader) skip() error {
	switch r.kind() {
	case '"':
		_, err := r.str()
		return err
	case '{', '[':
		d0 := r.depth()
		if err := r.open(); err != nil {
			return err
		}
		return r.close(d0)
	}
	_, err := r.scalar()
	return err
}

// close reads the rest of the arrays and objects open beyond depth d0.
func (r *reader) close(d0 int) error {
	for r.depth() > d0 {
		if r.afterName {
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		more, err := r.more()
		if err != nil {
			return err
		}
		if !more {
			continue
		}
		if r.stack[len(r.stack)-1] == '{' {
			if _, err := r.name(); err != nil {
				return err
			}
		}
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}

// finish reads the rest of a value that began after offset start at depth
// d0 and was read in part, returning its bytes.
func (r *reader) finish(start, d0 int) ([]byte, error) {
	if r.offset() == start || r.afterName && r.depth() == d0 {
		if err := r.skip(); err != nil {
			return nil, err
		}
	}
	if err := r.close(d0); err != nil {
		return nil, err
	}
	return bytes.Trim(r.data[start:r.i], " \t\r\n:,"), nil
}

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
// every update (discriminators, statuses, kinds), are read into strings
// allocated once.
const maxInterned = 32

var (
	keyNames   = map[string]string{}
	valueNames = map[string]string{}
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
