package session

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Elicit implements agent.Client: an agent's elicitation/create becomes an
// elicitationRequest event, answered by RespondElicitation under the rules
// of a permission request (permissions.go).
func (s *Session) Elicit(params json.RawMessage) (<-chan *acpv2.ElicitationResolved, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.roomLocked("elicitation"); err != nil {
		return nil, nil, err
	}
	req, err := acpjson.DecodeElicitationRequest(params, s.version)
	if err != nil {
		s.log.Warn("agent sent a malformed elicitation", "error", err)
		return nil, nil, err
	}
	// Named after the seq of its event, as a permission request is.
	id := fmt.Sprintf("elicit-%d", s.seq+1)
	req.RequestId = id
	a := &ask{elicit: req, answer: make(chan *acpv2.ElicitationResolved, 1)}
	withdraw, err := s.openLocked(id, a, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ElicitationRequest{ElicitationRequest: req}})
	if err != nil {
		return nil, nil, err
	}
	return a.answer, withdraw, nil
}

// ElicitationComplete implements agent.Client: the agent's
// elicitation/complete becomes an elicitationComplete event.
func (s *Session) ElicitationComplete(params json.RawMessage) {
	id, err := acpjson.DecodeElicitationComplete(params)
	if err != nil {
		s.log.Warn("agent sent a malformed elicitation/complete", "error", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_ElicitationComplete{
		ElicitationComplete: &acpv2.ElicitationComplete{ElicitationId: id}}}}, nil)
}

// resolveElicitationLocked answers elicitation id with res, as by (a user,
// or AnsweredByAgent...). s.mu must be held.
func (s *Session) resolveElicitationLocked(id string, res *acpv2.ElicitationResolved, by string) {
	a := s.closeAskLocked(id)
	if a == nil {
		return
	}
	label := res.GetAction()
	if a.timedOut {
		label = "timed_out"
	}
	s.met.ElicitationAnswered(a.elicit.GetMode(), label, time.Since(a.asked))
	// What an answered elicitation keeps: that it was one.
	a.elicit, a.timer = &acpv2.ElicitationRequest{}, nil
	res.RequestId, res.AnsweredBy = id, by
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_ElicitationResolved{ElicitationResolved: res}}}, nil)
	a.answer <- res
	close(a.answer)
}

// RespondElicitation answers elicitation id with action (accept, decline
// or cancel) as user ("" without authentication); content goes with
// accept, and must fit the request's schema (checkContent).
func (s *Session) RespondElicitation(id, action string, content *structpb.Struct, user string) error {
	if action != acpjson.ElicitAccept && len(content.GetFields()) > 0 {
		return fmt.Errorf("%w: content goes only with accept", ErrInvalid)
	}
	switch action {
	case acpjson.ElicitAccept, acpjson.ElicitDecline, acpjson.ElicitCancel:
	default:
		return fmt.Errorf("%w: action %q is not accept, decline or cancel", ErrInvalid, action)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.findAskLocked(id, true)
	if err != nil {
		return err
	}
	res := &acpv2.ElicitationResolved{Action: action}
	if action == acpjson.ElicitAccept {
		if err := checkContent(a.elicit, content); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if len(content.GetFields()) > 0 {
			res.Content = content
		}
	}
	s.resolveElicitationLocked(id, res, answeredBy(user))
	return nil
}

// pendingElicitationsLocked returns the elicitations waiting for an
// answer, oldest first. s.mu must be held.
func (s *Session) pendingElicitationsLocked() []*acpv2.ElicitationRequest {
	var out []*ask
	for _, a := range s.asks {
		if a.elicit != nil && !a.resolved {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *ask) int { return cmp.Compare(a.seq, b.seq) })
	reqs := make([]*acpv2.ElicitationRequest, len(out))
	for i, a := range out {
		reqs[i] = a.elicit
	}
	return reqs
}

// pendingElicitations is pendingElicitationsLocked, taking s.mu.
func (s *Session) pendingElicitations() []*acpv2.ElicitationRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingElicitationsLocked()
}

// checkContent checks the content accepted for elicitation req. Form mode
// takes an object (content is one) whose members are the requested
// schema's top-level properties, each of the property's type (`string`,
// `number`, `integer`, `boolean`, or for `array` a list of strings), a
// string or list item among the property's `enum` when it has one; and
// every `required` property is given. A property of another type takes
// any value ACP allows in content (checkValue); formats, lengths and
// ranges are not checked. Any other mode takes no content.
func checkContent(req *acpv2.ElicitationRequest, content *structpb.Struct) error {
	if req.GetMode() != acpjson.ElicitForm {
		if len(content.GetFields()) > 0 {
			return fmt.Errorf("a %s-mode elicitation takes no content", req.GetMode())
		}
		return nil
	}
	schema := req.GetRequestedSchema().GetFields()
	props := schema["properties"].GetStructValue().GetFields()
	for name, v := range content.GetFields() {
		prop, ok := props[name]
		if !ok {
			return fmt.Errorf("content property %q is not one the requested schema has", name)
		}
		if err := checkValue(prop.GetStructValue().GetFields(), v); err != nil {
			return fmt.Errorf("content property %q: %w", name, err)
		}
	}
	for _, r := range schema["required"].GetListValue().GetValues() {
		if name := r.GetStringValue(); name != "" {
			if _, ok := content.GetFields()[name]; !ok {
				return fmt.Errorf("content property %q is required", name)
			}
		}
	}
	return nil
}

// checkValue checks v against property schema prop (checkContent). Any
// value must be one ACP's ElicitationContentValue allows: a string, a
// number, a boolean or an array of strings.
func checkValue(prop map[string]*structpb.Value, v *structpb.Value) error {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue, *structpb.Value_NumberValue, *structpb.Value_BoolValue:
	case *structpb.Value_ListValue:
		for _, item := range k.ListValue.GetValues() {
			if _, ok := item.GetKind().(*structpb.Value_StringValue); !ok {
				return fmt.Errorf("want a string, a number, a boolean or an array of strings")
			}
		}
	default:
		return fmt.Errorf("want a string, a number, a boolean or an array of strings")
	}
	typ := prop["type"].GetStringValue()
	switch typ {
	case "string":
		str, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return fmt.Errorf("want a string")
		}
		return inEnum(prop, str.StringValue)
	case "number", "integer":
		n, ok := v.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return fmt.Errorf("want a number")
		}
		if typ == "integer" && n.NumberValue != math.Trunc(n.NumberValue) {
			return fmt.Errorf("want an integer")
		}
	case "boolean":
		if _, ok := v.GetKind().(*structpb.Value_BoolValue); !ok {
			return fmt.Errorf("want a boolean")
		}
	case "array":
		list, ok := v.GetKind().(*structpb.Value_ListValue)
		if !ok {
			return fmt.Errorf("want an array of strings")
		}
		items := prop["items"].GetStructValue().GetFields()
		for _, item := range list.ListValue.GetValues() {
			if err := inEnum(items, item.GetStringValue()); err != nil {
				return err
			}
		}
	}
	return nil
}

// inEnum checks that s is among the values of prop's `enum`, when it has
// one.
func inEnum(prop map[string]*structpb.Value, s string) error {
	enum := prop["enum"].GetListValue()
	if enum == nil {
		return nil
	}
	for _, e := range enum.GetValues() {
		if e.GetStringValue() == s {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of the schema's enum values", s)
}
