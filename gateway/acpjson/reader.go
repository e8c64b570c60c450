package acpjson

import (
	"bytes"
	"errors"
	"hash/maphash"
	"io"
	"iter"
	"maps"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
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

// reader reads one JSON document token by token with jsontext, which
// validates it as it goes and reads straight from the document's bytes (a
// bytes.Buffer is read without a copy), so that every value read is a
// slice of the document: a member whose value the decoder could not use
// is decoded again from its bytes.
//
// It reads JSON as encoding/json does: invalid UTF-8 and lone surrogates
// become U+FFFD (AllowInvalidUTF8), and a member given twice is read
// twice, the decoder keeping the last (AllowDuplicateNames). What it
// refuses, encoding/json refuses too; the error then returned is
// encoding/json's (see syntaxError).
type reader struct {
	dec  jsontext.Decoder
	bb   bytes.Buffer
	data []byte
	// limit is the depth (jsontext's StackDepth) beyond which the reader
	// refuses the document with errDeep.
	limit int
	// buf holds a string being unescaped.
	buf []byte
	// names holds member names not in keyNames, by a hash of their bytes:
	// those of _meta and rawInput objects recur from line to line.
	names [64]string
}

var readOpts = []jsontext.Options{jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true)}

// readers keeps readers, with jsontext's state, for reuse.
var readers = sync.Pool{New: func() any { return new(reader) }}

// getReader returns a reader of data, taking arrays and objects levels
// deep.
func getReader(data []byte, levels int) *reader {
	r := readers.Get().(*reader)
	r.data, r.limit = data, levels
	r.bb = *bytes.NewBuffer(data)
	r.dec.Reset(&r.bb, readOpts...)
	return r
}

func putReader(r *reader) {
	r.data = nil
	r.bb = bytes.Buffer{}
	r.dec.Reset(&r.bb)
	if cap(r.buf) > 64<<10 {
		r.buf = nil
	}
	readers.Put(r)
}

// errDeep is a document nested deeper than the reader takes; errSyntax one
// that is not JSON. Neither reaches a caller: the document's error is
// worded as encoding/json words it (syntaxError).
var (
	errDeep   = errors.New("acpjson: nested too deep")
	errSyntax = errors.New("acpjson: not JSON")
)

// kind returns the kind of the next value, or 0 when there is none.
func (r *reader) kind() jsontext.Kind { return r.dec.PeekKind() }

// depth is the number of arrays and objects the reader is in.
func (r *reader) depth() int { return r.dec.StackDepth() }

// offset is the offset after the last token read.
func (r *reader) offset() int { return int(r.dec.InputOffset()) }

// open reads the '{' or '[' that must come next.
func (r *reader) open() error {
	tok, err := r.dec.ReadToken()
	if err != nil {
		return errSyntax
	}
	if k := tok.Kind(); k != '{' && k != '[' {
		return errSyntax
	}
	if r.dec.StackDepth() > r.limit {
		return errDeep
	}
	return nil
}

// more reports whether the object or array being read has another
// member or element, reading its end when not.
func (r *reader) more() (bool, error) {
	switch r.dec.PeekKind() {
	case '}', ']':
		if _, err := r.dec.ReadToken(); err != nil {
			return false, errSyntax
		}
		return false, nil
	case 0:
		return false, errSyntax
	}
	return true, nil
}

// name reads a member name. The bytes are valid until the next read.
func (r *reader) name() ([]byte, error) {
	v, err := r.dec.ReadValue()
	if err != nil {
		return nil, errSyntax
	}
	return r.unquote(v), nil
}

// unquote returns the text of the JSON string v, which jsontext read and
// so found well formed. The bytes are valid until the next read.
func (r *reader) unquote(v []byte) []byte {
	s := v[1 : len(v)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return s
	}
	r.buf = unescape(r.buf[:0], s)
	return r.buf
}

// unescape appends to b the text of the well-formed JSON string body s.
// Invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD, as in
// encoding/json.
func unescape(b, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
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
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s[i+2:])
					}
					if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
						b = utf8.AppendRune(b, pair)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default: // '"', '\\', '/'
				b = append(b, e)
			}
			i += 2
		default:
			// The run of bytes up to the next escape, in one append when
			// it is valid UTF-8: text with escapes (code, above all) is
			// mostly such runs.
			k := bytes.IndexByte(s[i:], '\\')
			if k < 0 {
				k = len(s) - i
			}
			b = appendUTF8(b, s[i:i+k])
			i += k
		}
	}
	return b
}

// appendUTF8 appends run to b, its invalid UTF-8 bytes as U+FFFD.
func appendUTF8(b, run []byte) []byte {
	if utf8.Valid(run) {
		return append(b, run...)
	}
	for len(run) > 0 {
		r, size := utf8.DecodeRune(run)
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, run[:size]...)
		}
		run = run[size:]
	}
	return b
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

// str reads a string value.
func (r *reader) str() (string, error) {
	v, err := r.dec.ReadValue()
	if err != nil {
		return "", errSyntax
	}
	b := r.unquote(v)
	if len(b) <= maxInterned {
		if s, ok := valueNames[string(b)]; ok {
			return s, nil
		}
	}
	return string(b), nil
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

// scalar reads a number, true, false or null, returning its bytes.
func (r *reader) scalar() ([]byte, error) {
	v, err := r.dec.ReadValue()
	if err != nil {
		return nil, errSyntax
	}
	return v, nil
}

// end reports whether nothing but whitespace follows the value read.
func (r *reader) end() bool {
	_, err := r.dec.ReadToken()
	return err == io.EOF
}

// skip reads the next value, whatever it is, refusing it when it nests
// beyond the reader's limit.
func (r *reader) skip() error {
	d0 := r.depth()
	for {
		tok, err := r.dec.ReadToken()
		if err != nil {
			return errSyntax
		}
		if k := tok.Kind(); (k == '{' || k == '[') && r.depth() > r.limit {
			return errDeep
		}
		if r.depth() == d0 {
			return nil
		}
	}
}

// finish reads the rest of a value that began after offset start at depth
// d0 and was read in part, returning its bytes.
func (r *reader) finish(start, d0 int) ([]byte, error) {
	if r.offset() == start {
		if err := r.skip(); err != nil {
			return nil, err
		}
	}
	for r.depth() > d0 {
		tok, err := r.dec.ReadToken()
		if err != nil {
			return nil, errSyntax
		}
		if k := tok.Kind(); (k == '{' || k == '[') && r.depth() > r.limit {
			return nil, errDeep
		}
	}
	return bytes.TrimLeft(r.data[start:r.offset()], " \t\r\n:,"), nil
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
