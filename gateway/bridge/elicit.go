package bridge

import (
	"context"
	"encoding/json"

	"connectrpc.com/connect"
	"github.com/sourcegraph/jsonrpc2"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// clientCapabilities is the part of the editor's capabilities the bridge
// reads (v1 clientCapabilities, v2 capabilities: the same shape).
type clientCapabilities struct {
	Elicitation struct {
		Form json.RawMessage `json:"form"`
		URL  json.RawMessage `json:"url"`
	} `json:"elicitation"`
}

// elicitModes returns the elicitation modes c advertises: a mode is
// offered by an object, even {}; omitted or null does not offer it.
func (c clientCapabilities) elicitModes() map[string]bool {
	offered := func(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }
	return map[string]bool{acpjson.ElicitForm: offered(c.Elicitation.Form), acpjson.ElicitURL: offered(c.Elicitation.URL)}
}

// elicits says whether the editor advertised elicitations of mode. Those
// it did not are left to the session's other clients: the bridge does
// not answer them.
func (b *bridge) elicits(mode string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.elicit[mode]
}

// elicitLocked relays the gateway's elicitation er to the editor as an
// elicitation/create (the bridge's own request) and, in its own goroutine,
// the editor's answer back with RespondElicitation, as askLocked does a
// permission request. s.mu must be held.
func (b *bridge) elicitLocked(s *session, er *acpv2.ElicitationRequest) {
	ctx, stop := context.WithCancel(b.base)
	a := &ask{editorID: jsonrpc2.ID{Num: b.nextID.Add(1)}, stop: stop}
	s.asks[er.GetRequestId()] = a
	if !b.spawn(func() {
		defer stop()
		b.relayElicitation(ctx, s, a, er)
	}) {
		stop()
	}
}

func (b *bridge) relayElicitation(ctx context.Context, s *session, a *ask, er *acpv2.ElicitationRequest) {
	var res struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content"`
	}
	call, err := b.conn.DispatchCall(ctx, "elicitation/create", elicitationParams(s.id, er), jsonrpc2.PickID(a.editorID))
	if err == nil {
		err = call.Wait(ctx, &res)
	}
	if editorGone(ctx, err) || !s.claim(a) {
		return // the editor went, or the gateway resolved it meanwhile
	}
	req := &acpv2.RespondElicitationRequest{SessionId: s.id, RequestId: er.GetRequestId(), Action: acpjson.ElicitCancel}
	switch {
	case err != nil:
		b.log.Info("the editor's elicitation answer failed; answering cancel", "session", s.id, "request", er.GetRequestId(), "error", err)
	case res.Action == acpjson.ElicitAccept || res.Action == acpjson.ElicitDecline:
		req.Action = res.Action
		if res.Action == acpjson.ElicitAccept && len(res.Content) > 0 {
			if req.Content, err = structpb.NewStruct(res.Content); err != nil {
				b.log.Info("the editor's elicitation content is not JSON the gateway takes; answering cancel", "session", s.id, "error", err)
				req.Action, req.Content = acpjson.ElicitCancel, nil
			}
		}
	}
	rctx, cancel := context.WithTimeout(b.base, callTimeout)
	defer cancel()
	_, err = b.client.RespondElicitation(rctx, connect.NewRequest(req))
	if connect.CodeOf(err) == connect.CodeInvalidArgument && req.Action == acpjson.ElicitAccept {
		// Content that does not fit the schema: the agent is not left
		// waiting for an answer the editor already gave.
		b.log.Info("the gateway refused the editor's elicitation content; answering cancel", "session", s.id, "request", er.GetRequestId(), "error", err)
		req.Action, req.Content = acpjson.ElicitCancel, nil
		_, err = b.client.RespondElicitation(rctx, connect.NewRequest(req))
	}
	b.relayed(s, "elicitation", er.GetRequestId(), err)
}

// elicitationParams returns the params of the elicitation/create for er,
// the same in ACP v1 and v2.
func elicitationParams(sessionID string, er *acpv2.ElicitationRequest) map[string]any {
	params := map[string]any{"sessionId": sessionID, "mode": er.GetMode(), "message": er.GetMessage()}
	meta := er.GetMeta().AsMap()
	if rest, ok := meta["params"].(map[string]any); ok && er.GetMode() != acpjson.ElicitForm && er.GetMode() != acpjson.ElicitURL {
		// A custom mode's own members, kept by the gateway.
		for k, v := range rest {
			params[k] = v
		}
		delete(meta, "params")
	}
	if len(meta) > 0 {
		params["_meta"] = meta
	}
	if er.GetToolCallId() != "" {
		params["toolCallId"] = er.GetToolCallId()
	}
	switch er.GetMode() {
	case acpjson.ElicitForm:
		params["requestedSchema"] = er.GetRequestedSchema().AsMap()
	case acpjson.ElicitURL:
		params["url"], params["elicitationId"] = er.GetUrl(), er.GetElicitationId()
	}
	return params
}
