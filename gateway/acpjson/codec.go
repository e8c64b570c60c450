package acpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"reflect"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Version is the ACP protocol version an agent negotiated at initialize.
type Version int

const (
	// V1 is ACP protocol version 1: tool calls are created with `tool_call`
	// and updated with `tool_call_update`, and a `null` patch field means
	// "unchanged".
	V1 Version = 1
	// V2 is ACP protocol version 2: `tool_call_update` is an upsert whose
	// `null` patch field means "clear".
	V2 Version = 2
)

// ErrNoV1Form is returned by [EncodeUpdate] for a v2 update that ACP v1
// cannot express at all (a tool-call content chunk, terminal updates, ...).
// The caller decides what to send instead, for example the merged tool call.
var ErrNoV1Form = errors.New("acpjson: update has no ACP v1 form")

// An Error reports ACP JSON that could not be decoded. Its message names the
// offending member and is safe to show to a client.
type Error struct {
	// Path is the dotted path of the member, such as "update.toolCallId".
	Path string
	// Reason says what is wrong.
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "acp json: " + e.Reason
	}
	return "acp json: " + e.Path + ": " + e.Reason
}

// DecodeUpdate decodes the `update` member of an ACP `session/update`
// notification sent by an agent that negotiated version v.
//
// Updates discriminated by `sessionUpdate` follow ACP v1 or v2; an update
// discriminated by `type` instead follows the draft notification dialect
// (`content`, `tool_call` with a nested `toolCall`, `usage`, ...) and is
// normalised to the matching v2 variant. A v1 `tool_call` or
// `tool_call_update` becomes a v2 tool_call_update in which a v1 `null`
// means unchanged. Unknown and `_`-prefixed updates are kept whole in
// SessionUpdate.unknown.
func DecodeUpdate(data []byte, v Version) (*acpv2.SessionUpdate, error) {
	u := &acpv2.SessionUpdate{}
	if err := Decode(data, u, v); err != nil {
		return nil, err
	}
	return u, nil
}

// KeepUnknown returns an update that [DecodeUpdate] refused, kept whole as
// an unknown update so that nothing the agent sent is lost. A JSON object
// becomes the body as it is; any other JSON value is kept under the member
// "update". It returns nil for data that is not JSON at all.
//
// Arrays and objects nested deeper than [MaxDepth] (counting the body as
// level 1) are kept as strings of their JSON, so that the update stays
// within the depth every decoder takes.
func KeepUnknown(data []byte) *acpv2.SessionUpdate {
	v, _, err := parseStd(data) // anything after the first value is ignored
	if err != nil {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		obj = map[string]any{"update": v}
	}
	clipDepth(obj, MaxDepth)
	tag, _ := obj["sessionUpdate"].(string)
	return &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_Unknown{Unknown: &acpv2.UnknownUpdate{SessionUpdate: tag, Body: toStruct(obj)}}}
}

// Decode decodes the ACP JSON object data into m, which must be one of the
// acp.v2 messages that mirror an ACP type (ContentBlock, ToolCallUpdate,
// ToolCall, PermissionOption, SessionUpdate, ...).
func Decode(data []byte, m proto.Message, v Version) error {
	r := getReader(data, MaxDepth)
	defer putReader(r)
	d := decoder{version: v}
	var err error
	if u, ok := m.(*acpv2.SessionUpdate); ok {
		err = d.update(r, &u)
	} else if t := tableOf(m.ProtoReflect().Descriptor()); t == nil {
		err = &Error{Reason: fmt.Sprintf("%s is not an ACP type", m.ProtoReflect().Descriptor().FullName())}
	} else if r.kind() != '{' {
		err = d.notObject(r)
	} else {
		err = d.object(r, t, reflect.ValueOf(m).UnsafePointer())
	}
	if err == nil && r.end() {
		return nil
	}
	return docError(data, err)
}

// docError is the error of the document data, which the decoder refused
// with err (nil when data held more than one value): encoding/json's when
// data is not one JSON value, then the depth's, then err.
func docError(data []byte, err error) error {
	v, trailing, jerr := parseStd(data)
	switch {
	case jerr != nil:
		return &Error{Reason: "not valid JSON: " + jerr.Error()}
	case trailing:
		return &Error{Reason: "trailing data after the JSON object"}
	case deeper(v, MaxDepth):
		return tooDeep()
	case err == nil || !semantic(err):
		// The reader refused what encoding/json takes: it must not.
		return &Error{Reason: "not valid JSON"}
	}
	return err
}

// EncodeUpdate encodes u as the `update` member of an ACP `session/update`
// notification for an agent or client speaking version v.
//
// For V2 the encoding is lossless: decoding v2 JSON and encoding it again
// yields the same JSON value. For V1 it is best-effort, as the v2 upsert
// proposal describes: a tool_call_update becomes a v1 `tool_call_update`,
// scalar clears are dropped (v1 cannot express them), collection clears are
// sent as `[]`, and updates with no v1 form return [ErrNoV1Form].
func EncodeUpdate(u *acpv2.SessionUpdate, v Version) ([]byte, error) {
	return Encode(u, v)
}

// EncodeToolCallV1 encodes a merged tool call as a v1 `tool_call` session
// update, the form a v1 client expects the first time it sees an id.
func EncodeToolCallV1(tc *acpv2.ToolCall) ([]byte, error) {
	e := encoder{version: V1}
	e.buf.WriteString(`{"sessionUpdate":"tool_call"`)
	if err := e.fields(tc.ProtoReflect(), false); err != nil {
		return nil, err
	}
	e.buf.WriteByte('}')
	return e.buf.Bytes(), nil
}

// Encode encodes m, one of the acp.v2 messages that mirror an ACP type, as
// ACP JSON of version v.
func Encode(m proto.Message, v Version) ([]byte, error) {
	e := encoder{version: v}
	var err error
	if u, ok := m.(*acpv2.SessionUpdate); ok {
		err = e.sessionUpdate(u)
	} else {
		err = e.object(m.ProtoReflect())
	}
	if err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// deeper reports whether v nests arrays and objects more than levels deep.
func deeper(v any, levels int) bool {
	switch x := v.(type) {
	case map[string]any:
		if levels == 0 {
			return true
		}
		for _, e := range x {
			if deeper(e, levels-1) {
				return true
			}
		}
	case []any:
		if levels == 0 {
			return true
		}
		for _, e := range x {
			if deeper(e, levels-1) {
				return true
			}
		}
	}
	return false
}

// clipDepth replaces, in place, each array or object of v nested more
// than levels deep by a string of its JSON.
func clipDepth(v any, levels int) any {
	switch x := v.(type) {
	case map[string]any:
		if levels == 0 {
			return jsonText(x)
		}
		for k, e := range x {
			x[k] = clipDepth(e, levels-1)
		}
	case []any:
		if levels == 0 {
			return jsonText(x)
		}
		for i, e := range x {
			x[i] = clipDepth(e, levels-1)
		}
	}
	return v
}

// jsonText is the JSON of a parsed value, as encoding/json writes it
// (without escaping HTML).
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // parsed values always encode
	return strings.TrimSuffix(b.String(), "\n")
}

// parseStd parses the JSON value at the start of data with encoding/json,
// numbers as json.Number; trailing reports whether anything but whitespace
// follows it.
func parseStd(data []byte) (v any, trailing bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false, err
	}
	rest := data[dec.InputOffset():]
	return v, len(bytes.TrimLeft(rest, " \t\r\n")) > 0, nil
}

// tooDeep is the error of a document nested deeper than MaxDepth.
func tooDeep() error {
	return &Error{Reason: fmt.Sprintf("arrays and objects nested more than %d levels deep, which the gateway does not take: flatten the JSON", MaxDepth)}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// toValue converts a parsed JSON value to a google.protobuf.Value. Numbers
// become float64, as google.protobuf.Value requires.
func toValue(v any) *structpb.Value {
	switch v := v.(type) {
	case nil:
		return structpb.NewNullValue()
	case bool:
		return structpb.NewBoolValue(v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			// Out of float64 range: keep the digits rather than lose the value.
			return structpb.NewStringValue(string(v))
		}
		return structpb.NewNumberValue(f)
	case float64:
		return structpb.NewNumberValue(v)
	case string:
		return structpb.NewStringValue(v)
	case []any:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(v))}
		for i, e := range v {
			l.Values[i] = toValue(e)
		}
		return structpb.NewListValue(l)
	case map[string]any:
		return structpb.NewStructValue(toStruct(v))
	}
	return structpb.NewNullValue()
}

func toStruct(obj map[string]any) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(obj))}
	for k, v := range obj {
		s.Fields[k] = toValue(v)
	}
	return s
}
