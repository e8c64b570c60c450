// Package acpjson converts between ACP's JSON wire forms and the acp.v2
// protobuf model.
//
// It decodes the session updates of ACP v1, ACP v2 and the
// `type`-discriminated draft dialect into [acpv2.SessionUpdate], keeping the
// difference between an omitted member, a member set to null and a member set
// to a value wherever ACP gives it meaning (the tool-call patch fields, see
// [acpv2.ToolCallUpdate]). It encodes the model back to ACP v2 JSON without
// loss, and to ACP v1 as well as v1 allows.
//
// The codec is driven by the protobuf descriptors, so a message added to the
// model is covered without new code: an ACP member is the proto JSON name of
// its field, `_meta` is the field `meta`, and members the model does not know
// are kept in the field `extra` and written back unchanged. Numbers inside
// free-form JSON (`rawInput`, `_meta`, unknown members) are held as float64,
// as google.protobuf.Value requires, so integers beyond 2^53 lose precision.
//
// There is one decoder (stream.go). A tokenizer (reader.go) reads the JSON
// in one pass, as encoding/json reads it (invalid UTF-8 and lone
// surrogates become U+FFFD, the last of duplicate members wins, and what
// encoding/json refuses is refused with encoding/json's error), and the
// decoder writes each member straight into the generated message through
// tables built once per message from its descriptor and Go type
// (tables.go): a field's offset, its kind, its oneof wrapper. A member of
// the wrong shape, a union whose discriminator is not its first member, or
// one whose variant does not decode, is read to its end and decoded again
// from its bytes. The agent's requests go through the same tables
// (permission.go, elicitation.go): what the model cannot say, a v2
// permission subject whose tool call is the request's and an
// elicitation's mode-dependent members, is decided once the request is
// decoded. The generic decoder it replaced, from encoding/json's maps
// through protoreflect, is kept as the test oracle (oracle_test.go,
// requests_oracle_test.go) that the differential fuzz targets hold the
// decoder to.
//
// encoding/json's maps remain in three places, none on the path of an
// update the decoder takes: the draft dialect (draft.go) is rewritten as
// maps into the v2 update it stands for, which is then decoded, as the
// dialect is rare and its rewrite is easiest to read that way;
// [KeepUnknown] keeps a refused update whole, which may nest deeper than
// the reader takes, so it parses with encoding/json (10,000 levels) and
// keeps what lies deeper than [MaxDepth] as text; and a refused document's
// error is worded as encoding/json words it (docError).
package acpjson
