package bridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/sourcegraph/jsonrpc2"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// callTimeout bounds the short gateway calls the bridge makes on its own
// (Cancel, RespondPermission, RespondElicitation).
const callTimeout = 30 * time.Second

// turn is a prompt turn the editor started. Its fields are guarded by the
// session's mu.
type turn struct {
	// cancelWanted: the editor cancelled the turn, perhaps before the
	// gateway started it.
	cancelWanted bool
	// started: the gateway's turn_started arrived, so Cancel reaches the
	// turn.
	started bool
}

// ask is a session/request_permission or elicitation/create the bridge
// sent the editor.
type ask struct {
	editorID jsonrpc2.ID
	// done: the editor answered, or the gateway resolved the request.
	done bool
	stop context.CancelFunc
}

// prompt starts a session/prompt: it checks the request and records the
// turn at once, so that a session/cancel read right after it finds the
// turn, then runs the turn in its own goroutine.
func (b *bridge) prompt(id jsonrpc2.ID, params json.RawMessage) {
	var p struct {
		SessionID string            `json:"sessionId"`
		Prompt    []json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		b.reply(id, nil, invalidParams("session/prompt: %v", err))
		return
	}
	if p.SessionID == "" || len(p.Prompt) == 0 {
		b.reply(id, nil, invalidParams("session/prompt needs a sessionId and at least one content block"))
		return
	}
	s := b.sessionFor(p.SessionID, false)
	blocks := make([]*acpv2.ContentBlock, len(p.Prompt))
	for i, raw := range p.Prompt {
		blocks[i] = &acpv2.ContentBlock{}
		if err := acpjson.Decode(raw, blocks[i], s.conv.version); err != nil {
			b.reply(id, nil, invalidParams("session/prompt: prompt[%d]: %v", i, err))
			return
		}
	}
	s.mu.Lock()
	if s.turn != nil {
		s.mu.Unlock()
		b.reply(id, nil, &jsonrpc2.Error{Code: codeInternal,
			Message: fmt.Sprintf("a prompt is already running in session %s; cancel it or wait for its end", s.id)})
		return
	}
	t := &turn{}
	s.turn = t
	s.mu.Unlock()
	b.call(id, func() { b.cancelTurn(s.id) }, func(ctx context.Context) (any, error) {
		defer func() {
			s.mu.Lock()
			if s.turn == t {
				s.turn = nil
			}
			s.mu.Unlock()
		}()
		return b.runPrompt(ctx, id, s, t, blocks)
	})
}

// runPrompt runs one turn on the gateway's Prompt stream, sending the editor
// each event's updates, and returns the prompt's answer: the stop reason
// (v1). A v2 editor is answered when the gateway starts the turn, and the
// turn's end is an idle state_update.
func (b *bridge) runPrompt(ctx context.Context, id jsonrpc2.ID, s *session, t *turn, blocks []*acpv2.ContentBlock) (any, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := b.client.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: s.id, Prompt: blocks}))
	if err != nil {
		cancel()
		return nil, rpcError("Prompt", err)
	}
	defer func() {
		cancel()
		_ = stream.Close()
	}()
	acked := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue // heartbeat
		}
		if _, ok := ev.GetEvent().(*acpv2.SessionEvent_TurnStarted); ok {
			acked = b.turnStarted(id, s, t)
		}
		b.handleLive(s, ev)
		if te := ev.GetTurnEnded(); te != nil {
			return b.endTurn(s, ev.GetSeq(), te, acked)
		}
	}
	err = stream.Err()
	s.mu.Lock()
	started := t.started
	s.mu.Unlock()
	if !started && connect.CodeOf(err) == connect.CodeAborted {
		// A Prompt stream is cut off for lagging (aborted) only once the
		// gateway started its turn: it subscribes the stream as it
		// starts the turn, and the turn's first events may lap it before
		// it sent the turn_started. The turn is under way.
		acked = b.turnStarted(id, s, t)
		started = true
	}
	if started && resumable(err) {
		// Cut off mid-turn (the stream fell too far behind, or the
		// gateway's replicas changed hands): the turn goes on in the
		// session's log; follow it there from where the editor is.
		end, werr := b.resumeTurn(ctx, s, err)
		if end != nil {
			return b.endTurn(s, end.GetSeq(), end.GetTurnEnded(), acked)
		}
		err = werr
	}
	var rerr *jsonrpc2.Error
	if err != nil {
		rerr = rpcError("Prompt", err)
	} else {
		rerr = &jsonrpc2.Error{Code: codeInternal, Message: "acp-gateway: the Prompt stream ended before the turn did"}
	}
	if acked {
		return b.endTurn(s, 0, &acpv2.TurnEnded{Error: rerr.Message}, true)
	}
	return nil, rerr
}

// turnStarted notes that the gateway started turn t of session s, which
// prompt id asked for: a cancel the editor asked for meanwhile goes to the
// gateway, and a v2 prompt is answered (acked) as accepted.
func (b *bridge) turnStarted(id jsonrpc2.ID, s *session, t *turn) (acked bool) {
	s.mu.Lock()
	t.started = true
	cancelNow := t.cancelWanted
	s.mu.Unlock()
	if cancelNow {
		b.spawn(func() { b.gatewayCancel(s.id) })
	}
	if s.conv.version == acpjson.V1 {
		return false
	}
	// A v2 prompt is answered once accepted.
	b.reply(id, struct{}{}, nil)
	return true
}

// resumable says whether a stream that ended with err may be taken up
// again with Watch afterSeq: it was cut off, not refused.
func resumable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeAborted,
		connect.CodeDeadlineExceeded, connect.CodeInternal, connect.CodeUnknown:
		return err != nil
	}
	return false
}

// resumeTurns bounds the Watch streams in a row that a cut-off turn is
// followed on while none of them brings the editor an event. A Watch
// that brings some is progress, and is followed by another however many
// came before: a turn that floods the session goes on being followed
// while the bridge keeps up with its log, however often the gateway cuts
// the bridge's streams off.
const resumeTurns = 8

// resumeTurn follows session s's log from where the editor is until the
// running turn's end, whose event it returns, sending the editor each
// event's updates; nil and the last stream's error if it cannot.
func (b *bridge) resumeTurn(ctx context.Context, s *session, cause error) (*acpv2.SessionEvent, error) {
	err := cause
	for idle := 0; idle < resumeTurns; idle++ {
		b.log.Info("the turn's stream was cut off: following the session's log", "session", s.id, "error", err)
		from := s.handled()
		var end *acpv2.SessionEvent
		if end, err = b.watchOnce(ctx, s, true); end != nil || !resumable(err) {
			return end, err
		}
		if s.handled() > from {
			idle = -1 // progress: the count starts again
		}
	}
	return nil, err
}

// endTurn answers the prompt for the turn's end, event seq (0 when the
// bridge ended the turn itself): with its stop reason, or a JSON-RPC error
// when the turn failed. A v2 editor, answered already, gets an idle
// state_update instead; a failure shows as an agent message and in the
// update's _meta.
func (b *bridge) endTurn(s *session, seq uint64, te *acpv2.TurnEnded, acked bool) (any, error) {
	if s.conv.version == acpjson.V1 || !acked {
		if te.GetError() != "" {
			return nil, &jsonrpc2.Error{Code: codeInternal, Message: "acp-gateway: the turn failed: " + te.GetError()}
		}
		reason := cmp.Or(te.GetStopReason(), "end_turn")
		if s.conv.version == acpjson.V1 {
			reason = v1StopReason(reason)
		}
		return map[string]any{"stopReason": reason}, nil
	}
	s.out.Lock()
	defer s.out.Unlock()
	b.emitAtLocked(s, seq, b.turnEndUpdates(s, te))
	return nil, errReplied
}

// turnEndUpdates returns what a v2 editor gets at a turn's end: an idle
// state_update with the stop reason, after the failure as an agent message
// when the turn failed (also in the update's _meta).
func (b *bridge) turnEndUpdates(s *session, te *acpv2.TurnEnded) []json.RawMessage {
	idle := stateUpdate("idle", cmp.Or(te.GetStopReason(), "end_turn"))
	updates := []*acpv2.SessionUpdate{idle}
	if msg := te.GetError(); msg != "" {
		id := newMessageID()
		updates = []*acpv2.SessionUpdate{{Update: &acpv2.SessionUpdate_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content:   &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "acp-gateway: the turn failed: " + msg}}},
			MessageId: &id,
		}}}, idle}
		if meta, err := structpb.NewStruct(map[string]any{"acpGateway": map[string]any{"error": msg}}); err == nil {
			idle.GetStateUpdate().Meta = meta
		}
	}
	out := make([]json.RawMessage, 0, len(updates))
	for _, u := range updates {
		js, err := acpjson.EncodeUpdate(u, s.conv.version)
		if err != nil {
			b.log.Warn("an update could not be encoded", "session", s.id, "error", err)
			continue
		}
		out = append(out, js)
	}
	return out
}

// cancelTurn cancels the editor's turn in session id: at once when the
// gateway has started it, else as soon as it does.
func (b *bridge) cancelTurn(id string) {
	b.mu.Lock()
	s := b.sessions[id]
	b.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	t := s.turn
	if t == nil || t.cancelWanted {
		s.mu.Unlock()
		return
	}
	t.cancelWanted = true
	started := t.started
	s.mu.Unlock()
	if started {
		b.spawn(func() { b.gatewayCancel(id) })
	}
}

// gatewayCancel cancels session id's turn on the gateway.
func (b *bridge) gatewayCancel(id string) {
	ctx, cancel := context.WithTimeout(b.base, callTimeout)
	defer cancel()
	_, err := b.client.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: id}))
	if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition { // failed_precondition: the turn ended
		b.log.Warn("cancelling a turn", "session", id, "error", err)
	}
}

// handleLive sends the editor what live event ev of session s makes, and
// relays its permission requests, once: with [Options.Follow] the Prompt
// stream of the editor's turn and the session's Watch both bring the
// turn's events, and the first to bring one handles it. A turn another
// client runs shows its prompt as the user's message (v1), and its end as
// an idle state_update (v2).
func (b *bridge) handleLive(s *session, ev *acpv2.SessionEvent) {
	s.out.Lock()
	defer s.out.Unlock()
	if seq := ev.GetSeq(); seq != 0 {
		if seq <= s.lastSeq {
			return
		}
		s.lastSeq = seq
	}
	s.mu.Lock()
	ours := s.turn != nil
	s.mu.Unlock()
	v1 := s.conv.version == acpjson.V1
	switch e := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_PermissionResolved:
		b.resolved(s, e.PermissionResolved.GetRequestId())
	case *acpv2.SessionEvent_ElicitationResolved:
		b.resolved(s, e.ElicitationResolved.GetRequestId())
	case *acpv2.SessionEvent_TurnStarted:
		if !ours && v1 {
			b.emitLocked(s, ev, true) // the prompt, as replayed
			return
		}
	case *acpv2.SessionEvent_TurnEnded:
		if !ours && !v1 {
			b.emitAtLocked(s, ev.GetSeq(), b.turnEndUpdates(s, e.TurnEnded))
			return
		}
	}
	b.emitLocked(s, ev, false)
	s.mu.Lock()
	b.relayLocked(s, ev)
	s.mu.Unlock()
}

// relayLocked asks the editor what ev, an event of session s, asks of the
// session's clients: a permission request, or an elicitation in a mode
// the editor takes. s.mu must be held.
func (b *bridge) relayLocked(s *session, ev *acpv2.SessionEvent) {
	if pr := ev.GetPermissionRequest(); pr != nil {
		b.askLocked(s, pr)
	}
	if er := ev.GetElicitationRequest(); er != nil && b.elicits(er.GetMode()) {
		b.elicitLocked(s, er)
	}
}

// askLocked relays the gateway's permission request pr to the editor as a
// session/request_permission (the bridge's own request) and, in its own
// goroutine, the editor's answer back with RespondPermission. s.mu must be
// held.
func (b *bridge) askLocked(s *session, pr *acpv2.PermissionRequest) {
	params, err := b.permissionParams(s, pr)
	if err != nil {
		b.log.Warn("a permission request could not be encoded; answering it cancelled", "session", s.id, "error", err)
	}
	ctx, stop := context.WithCancel(b.base)
	a := &ask{editorID: jsonrpc2.ID{Num: b.nextID.Add(1)}, stop: stop}
	s.asks[pr.GetRequestId()] = a
	if !b.spawn(func() {
		defer stop()
		b.relayPermission(ctx, s, a, pr.GetRequestId(), params)
	}) {
		stop()
	}
}

func (b *bridge) relayPermission(ctx context.Context, s *session, a *ask, requestID string, params json.RawMessage) {
	var res struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	var err error
	if params == nil {
		err = fmt.Errorf("not asked")
	} else {
		var call jsonrpc2.Waiter
		call, err = b.conn.DispatchCall(ctx, "session/request_permission", params, jsonrpc2.PickID(a.editorID))
		if err == nil {
			err = call.Wait(ctx, &res)
		}
	}
	if editorGone(ctx, err) || !s.claim(a) {
		return // the editor went, or the gateway resolved it meanwhile
	}
	req := &acpv2.RespondPermissionRequest{SessionId: s.id, RequestId: requestID}
	if err == nil && res.Outcome.Outcome == "selected" && res.Outcome.OptionID != "" {
		req.OptionId = res.Outcome.OptionID
	} else {
		if err != nil {
			b.log.Info("the editor's permission answer failed; answering cancelled", "session", s.id, "request", requestID, "error", err)
		}
		req.Cancelled = true
	}
	rctx, cancel := context.WithTimeout(b.base, callTimeout)
	defer cancel()
	_, err = b.client.RespondPermission(rctx, connect.NewRequest(req))
	b.relayed(s, "permission", requestID, err)
}

// editorGone reports whether err, how the bridge's request to the editor
// made with ctx failed, says that the editor went (its connection closed,
// the bridge stopping) or that the gateway resolved the request first
// (ctx ended): then there is no answer of the editor's to relay, not even
// a cancelled one. A request the editor went without answering stays
// pending for the session's other clients, and for this one should it
// take the session up again (on /acp, a GET with Last-Event-ID on a new
// connection asks it again), until one answers or it times out.
func editorGone(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, jsonrpc2.ErrClosed) || ctx.Err() != nil)
}

// claim marks the editor's answer to a as the one to relay, and reports
// false when the gateway resolved a first (the editor was then told).
func (s *session) claim(a *ask) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	resolved := a.done
	a.done = true
	return !resolved
}

// relayed logs how relaying the editor's answer to what (permission,
// elicitation) request requestID went, err being the gateway's word: an
// answer that came late (answered or ended meanwhile) is not news.
func (b *bridge) relayed(s *session, what, requestID string, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound:
	default:
		if err != nil {
			b.log.Warn("relaying a "+what+" answer", "session", s.id, "request", requestID, "error", err)
		}
	}
}

// resolved handles the gateway's word that a permission request or an
// elicitation was resolved. When the editor has not answered it (the turn
// was cancelled, the request timed out, was withdrawn by the agent, or
// another client answered), the editor gets a $/cancel_request for it.
func (b *bridge) resolved(s *session, requestID string) {
	s.mu.Lock()
	a := s.asks[requestID]
	delete(s.asks, requestID)
	if a == nil || a.done {
		s.mu.Unlock()
		return
	}
	a.done = true
	s.mu.Unlock()
	_ = b.conn.Notify(b.base, "$/cancel_request", map[string]any{"requestId": a.editorID})
	a.stop()
}

// permissionParams returns the params of the session/request_permission
// for pr, in the editor's ACP version: v1 carries the tool call as
// `toolCall` (made up when the agent named none: see [permissionCall]),
// v2 a `title`, a `description` and a `subject`.
func (b *bridge) permissionParams(s *session, pr *acpv2.PermissionRequest) (json.RawMessage, error) {
	v := s.conv.version
	opts := pr.GetOptions()
	if v == acpjson.V1 {
		opts = v1Options(opts)
	}
	options := make([]json.RawMessage, 0, len(opts))
	for _, o := range opts {
		js, err := acpjson.Encode(o, v)
		if err != nil {
			return nil, err
		}
		options = append(options, js)
	}
	params := map[string]any{"sessionId": s.id, "options": options}
	meta := map[string]any{}
	for k, f := range pr.GetMeta().GetFields() {
		meta[k] = f.AsInterface()
	}
	// A gateway before the typed subject kept it in meta.
	subject := meta["subject"]
	delete(meta, "subject")
	if len(meta) > 0 {
		params["_meta"] = meta
	}
	if pr.GetSubject() != nil {
		js, err := acpjson.Encode(pr.GetSubject(), acpjson.V2)
		if err != nil {
			return nil, err
		}
		subject = json.RawMessage(js)
	}
	tc := pr.GetToolCall()
	if v == acpjson.V1 {
		if tc == nil {
			tc = permissionCall(pr)
		}
		js, err := acpjson.Encode(v1Patch(tc), acpjson.V1)
		if err != nil {
			return nil, err
		}
		params["toolCall"] = json.RawMessage(js)
	} else {
		title := pr.GetTitle()
		if title == "" {
			title = pr.GetPreview().GetTitle()
		}
		if title == "" {
			title = "Permission requested"
		}
		params["title"] = title
		if pr.Description != nil {
			params["description"] = pr.GetDescription()
		}
		switch {
		case tc != nil:
			js, err := acpjson.Encode(v2Patch(tc), acpjson.V2)
			if err != nil {
				return nil, err
			}
			params["subject"] = map[string]any{"type": "tool_call", "toolCall": json.RawMessage(js)}
		case subject != nil:
			params["subject"] = subject
		}
	}
	return json.Marshal(params)
}

// permissionCall makes up the v1 tool call of a permission request that
// names none (a v2 request about a command, say): titled with the
// request's title, else the command, else "Permission requested"; for a
// command, of kind execute with the command and its cwd as rawInput; with
// the request's description as its content.
func permissionCall(pr *acpv2.PermissionRequest) *acpv2.ToolCallUpdate {
	str := func(v string) *acpv2.StringPatch { return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: v}} }
	cmd := pr.GetSubject().GetCommand()
	title := cmp.Or(pr.GetTitle(), cmd.GetCommand(), "Permission requested")
	tc := &acpv2.ToolCallUpdate{ToolCallId: "permission-" + pr.GetRequestId(), Title: str(title)}
	if cmd != nil {
		tc.Kind = str("execute")
		tc.RawInput = &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"command": structpb.NewStringValue(cmd.GetCommand()),
			"cwd":     structpb.NewStringValue(cmd.GetCwd()),
		}})}}
	}
	if pr.Description != nil {
		tc.Content = &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{Value: &acpv2.ToolCallContentList{Items: []*acpv2.ToolCallContent{{
			Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{
				Text: &acpv2.TextContent{Text: pr.GetDescription()}}}},
		}}}}}
	}
	return tc
}
