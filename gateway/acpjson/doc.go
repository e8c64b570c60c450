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
package acpjson
