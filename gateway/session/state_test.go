package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/sessionstate"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
	"github.com/acp-gateway/acp-gateway/statestore/storeurl"
)

// stateScript is a v2 agent whose session/new (and resume) answer reports
// modes and config options, and whose turn reports every kind of state,
// then asks a permission.
func stateScript() agentsim.Script {
	up := func(s string) agentsim.Step { return agentsim.Step{Update: json.RawMessage(s)} }
	out := base64.StdEncoding.EncodeToString([]byte("hello "))
	more := base64.StdEncoding.EncodeToString([]byte("world"))
	return agentsim.Script{
		ProtocolVersion:      2,
		Resume:               true,
		SessionModes:         json.RawMessage(`{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},{"id":"code","name":"Code"}]}`),
		SessionConfigOptions: json.RawMessage(`[{"configId":"model","name":"Model","type":"select","currentValue":"fast","options":[{"value":"fast","name":"Fast"}]}]`),
		Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			up(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"test","description":"run the tests"}]}`),
			up(`{"sessionUpdate":"session_info_update","title":"Fix the build"}`),
			up(`{"sessionUpdate":"usage_update","used":1200,"size":200000}`),
			up(`{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p1","entries":[{"content":"read","priority":"high","status":"completed"}]}}`),
			up(`{"sessionUpdate":"terminal_update","terminalId":"t1","command":"go test","output":{"data":"` + out + `"}}`),
			up(`{"sessionUpdate":"terminal_output_chunk","terminalId":"t1","data":"` + more + `"}`),
			up(`{"sessionUpdate":"terminal_update","terminalId":"t1","exitStatus":{"exitCode":0}}`),
			{Permission: &agentsim.Permission{ToolCall: json.RawMessage(`{"toolCallId":"ask-1","title":"rm -rf build","kind":"delete","rawInput":{"path":"build"}}`)}},
		}}},
	}
}

// checkState fails t unless snap holds what stateScript's turn leaves.
func checkState(t *testing.T, when string, snap *acpv2.SessionSnapshot) {
	t.Helper()
	if got := snap.GetModes(); got.GetCurrentModeId() != "ask" || len(got.GetAvailableModes()) != 2 {
		t.Errorf("%s: modes %v, want ask of 2 (session/new's)", when, got)
	}
	if got := snap.GetConfigOptions(); len(got) != 1 || got[0].GetId() != "model" || got[0].GetCurrentValue().GetStringValue() != "fast" {
		t.Errorf("%s: config options %v, want model=fast (session/new's)", when, got)
	}
	if got := snap.GetAvailableCommands(); len(got) != 1 || got[0].GetName() != "test" {
		t.Errorf("%s: commands %v", when, got)
	}
	if snap.GetTitle() != "Fix the build" {
		t.Errorf("%s: title %q", when, snap.GetTitle())
	}
	if snap.GetUsage().GetUsed() != 1200 || snap.GetUsage().GetSize() != 200000 {
		t.Errorf("%s: usage %v", when, snap.GetUsage())
	}
	if e := snap.GetPlan().GetItems().GetEntries(); len(e) != 1 || e[0].GetContent() != "read" {
		t.Errorf("%s: plan %v", when, snap.GetPlan())
	}
	terms := snap.GetTerminals()
	if len(terms) != 1 || terms[0].GetCommand() != "go test" || string(terms[0].GetOutput()) != "hello world" ||
		terms[0].GetExitStatus().GetFields()["exitCode"] == nil {
		t.Errorf("%s: terminals %v, want go test with hello world, exited", when, terms)
	}
	if snap.GetFirstPrompt() != "fix it" {
		t.Errorf("%s: first prompt %q", when, snap.GetFirstPrompt())
	}
	if snap.GetUpdatedAt() == nil {
		t.Errorf("%s: no updated time", when)
	}
}

// The snapshot holds the session's materialised state (seeded by
// session/new's modes and config options, then the updates), which turn
// runs and which permission requests wait; all of it survives a restart
// of the gateway, from each store, where no turn runs any more.
func TestSnapshotHoldsTheSessionState(t *testing.T) {
	t.Parallel()
	cmd, err := agentsim.Command(stateScript())
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{
		"memory": "memory:",
		"bolt":   "bolt:" + filepath.Join(t.TempDir(), "sessions.db"),
		"redis":  testutil.StartRedis(t).URL(),
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := storeurl.Open(ctx, url, storeurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			opts := Options{Store: st, IdleTimeout: -1, Agents: map[string][]string{"sim": cmd}}
			m := NewManager(opts)
			s, err := m.Create(ctx, "", "sim", t.TempDir(), "")
			if err != nil {
				m.Close()
				t.Fatal(err)
			}
			if snap := s.Snapshot(); snap.GetModes().GetCurrentModeId() != "ask" || snap.GetTurnRunning() {
				t.Errorf("before a turn: modes %v, turn running %v", snap.GetModes(), snap.GetTurnRunning())
			}
			sub, err := s.Prompt(ctx, []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "fix it"}}}})
			if err != nil {
				m.Close()
				t.Fatal(err)
			}
			var started uint64
			for {
				ev, err := next(ctx, sub)
				if err != nil {
					t.Fatal(err)
				}
				if ev.GetTurnStarted() != nil {
					started = ev.GetSeq()
				}
				if ev.GetPermissionRequest() != nil {
					break
				}
			}
			// Asked: the turn runs and the request waits, for a client of
			// this gateway and for one that reads the store.
			live := s.Snapshot()
			s.mu.Lock()
			stored := s.stored
			s.mu.Unlock()
			for when, snap := range map[string]*acpv2.SessionSnapshot{"live": live, "stored": storedOf(ctx, t, st, s.ID(), stored)} {
				pend := snap.GetPendingPermissions()
				if !snap.GetTurnRunning() || snap.GetTurnStartedSeq() != started || snap.GetTurnStartedAt() == nil ||
					len(pend) != 1 || pend[0].GetToolCall().GetTitle().GetValue() != "rm -rf build" {
					t.Fatalf("%s, asked: turn running %v from %d (want %d), pending %v", when, snap.GetTurnRunning(), snap.GetTurnStartedSeq(), started, pend)
				}
				if pv := pend[0].GetPreview(); pv.GetToolCallId() != "ask-1" || pv.GetTitle() != "rm -rf build" || pv.GetKind() != "delete" {
					t.Errorf("%s, asked: the pending request's preview is %v, want the request's call", when, pv)
				}
				checkState(t, when, snap)
				if len(snap.GetToolCalls()) != 0 {
					t.Errorf("%s, asked: the request's call is among the calls before it was answered: %v", when, snap.GetToolCalls())
				}
			}
			sums, err := m.Summaries(ctx, "")
			if err != nil || len(sums) != 1 || !sums[0].GetTurnRunning() || sums[0].GetPendingPermissions() != 1 || sums[0].GetTitle() != "Fix the build" {
				t.Fatalf("summaries while asked: %v, %v", sums, err)
			}
			if err := s.RespondPermission(live.GetPendingPermissions()[0].GetRequestId(), "reject-once", false, ""); err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := next(ctx, sub)
				if err != nil {
					t.Fatal(err)
				}
				if ev.GetTurnEnded() != nil {
					break
				}
			}
			sub.Close()
			snap := s.Snapshot()
			if snap.GetTurnRunning() || len(snap.GetPendingPermissions()) != 0 {
				t.Errorf("after the turn: running %v, pending %v", snap.GetTurnRunning(), snap.GetPendingPermissions())
			}
			checkState(t, "after the turn", snap)
			checkAskedCall(t, "after the turn", snap)
			m.Close()

			// Another gateway on the same store.
			m2 := NewManager(opts)
			defer m2.Close()
			fromStore, err := m2.Snapshot(ctx, "", s.ID())
			if err != nil {
				t.Fatal(err)
			}
			checkState(t, "from the store", fromStore)
			restored, err := m2.Get(ctx, "", s.ID())
			if err != nil {
				t.Fatal(err)
			}
			snap = restored.Snapshot()
			checkState(t, "restored", snap)
			checkAskedCall(t, "restored", snap)
			if snap.GetTurnRunning() || len(snap.GetPendingPermissions()) != 0 {
				t.Errorf("restored: running %v, pending %v", snap.GetTurnRunning(), snap.GetPendingPermissions())
			}
			sums, err = m2.Summaries(ctx, "")
			if err != nil || len(sums) != 1 || sums[0].GetTurnRunning() || sums[0].GetFirstPrompt() != "fix it" || sums[0].GetUpdatedAt() == nil {
				t.Errorf("summaries after the restart: %v, %v", sums, err)
			}
		})
	}
}

// storedOf is the snapshot a gateway that does not run session id reads
// from st, once the store holds its events up to seq.
func storedOf(ctx context.Context, t *testing.T, st statestore.Store, id string, seq uint64) *acpv2.SessionSnapshot {
	t.Helper()
	for {
		rec, err := st.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.LastSeq >= seq {
			snap, err := storedSnapshot(ctx, st, rec)
			if err != nil {
				t.Fatal(err)
			}
			return snap
		}
		if err := st.WaitEvents(ctx, id, rec.LastSeq); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAskedCall fails t unless snap has the call of stateScript's
// permission request, which the agent never reported itself, as the
// request gave it: a rejected call is in the session's calls.
func checkAskedCall(t *testing.T, when string, snap *acpv2.SessionSnapshot) {
	t.Helper()
	calls := snap.GetToolCalls()
	if len(calls) != 1 || calls[0].GetToolCallId() != "ask-1" || calls[0].GetTitle() != "rm -rf build" ||
		calls[0].GetKind() != "delete" || calls[0].GetRawInput().GetStructValue().GetFields()["path"].GetStringValue() != "build" {
		t.Errorf("%s: calls %v, want the answered request's ask-1", when, calls)
	}
}

// readCounter counts the bytes of the tool calls and events a store
// hands out, by session, and the calls of ToolCalls.
type readCounter struct {
	statestore.Store
	mu        sync.Mutex
	bytes     map[string]int
	toolCalls int
}

func (r *readCounter) count(id string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytes[id] += n
}

func (r *readCounter) ToolCalls(ctx context.Context, id string) ([]*acpv2.ToolCall, uint64, error) {
	calls, asOf, err := r.Store.ToolCalls(ctx, id)
	n := 0
	for _, tc := range calls {
		n += proto.Size(tc)
	}
	r.count(id, n)
	r.mu.Lock()
	r.toolCalls++
	r.mu.Unlock()
	return calls, asOf, err
}

func (r *readCounter) ToolCall(ctx context.Context, id, callID string) (*acpv2.ToolCall, uint64, error) {
	tc, asOf, err := r.Store.ToolCall(ctx, id, callID)
	r.count(id, proto.Size(tc))
	return tc, asOf, err
}

func (r *readCounter) Events(ctx context.Context, id string, after uint64, limit int) ([]*encoded.Event, error) {
	evs, err := r.Store.Events(ctx, id, after, limit)
	n := 0
	for _, e := range evs {
		n += e.Size()
	}
	r.count(id, n)
	return evs, err
}

// ListSessions reads, for a session this gateway does not run, its state
// record and its last event, not its tool calls: what it reads of a
// session with 500 large calls is what it reads of one with one.
func TestSummariesDoNotReadTheToolCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := statestore.NewMemory(statestore.Options{})
	var st sessionstate.State
	st.Apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_SessionInfoUpdate{SessionInfoUpdate: &acpv2.SessionInfoUpdate{
		Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "Fix the build"}}}}})
	record, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range map[string]int{"few": 1, "many": 500} {
		if err := mem.CreateSession(ctx, &statestore.Session{ID: id, Agent: "a", State: statestore.StateAgentLost, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		changed := []statestore.Call{{ID: sessionstate.RecordID, Proto: record}}
		for i := range n {
			changed = append(changed, storetest.Calls(t, &acpv2.ToolCall{ToolCallId: fmt.Sprint("c", i), Title: strings.Repeat("x", 1<<10)})...)
		}
		ev := &acpv2.SessionEvent{Seq: 1, Time: timestamppb.New(time.Unix(1e9, 0)), Event: &acpv2.SessionEvent_StateChanged{
			StateChanged: &acpv2.SessionStateChanged{State: "ready"}}}
		if err := mem.Append(ctx, id, storetest.Encode(t, ev), changed); err != nil {
			t.Fatal(err)
		}
	}
	counter := &readCounter{Store: mem, bytes: map[string]int{}}
	m := NewManager(Options{Store: counter, IdleTimeout: -1})
	defer m.Close()
	sums, err := m.Summaries(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sum := range sums {
		if sum.GetTitle() != "Fix the build" || !sum.GetUpdatedAt().AsTime().Equal(time.Unix(1e9, 0)) {
			t.Errorf("summary of %s: %v", sum.GetSessionId(), sum)
		}
	}
	if len(sums) != 2 || counter.toolCalls != 0 || counter.bytes["many"] != counter.bytes["few"] {
		t.Fatalf("%d summaries; ToolCalls called %d times; bytes read %v, want as many for many calls as for one",
			len(sums), counter.toolCalls, counter.bytes)
	}
}

// A pending request in the snapshot has its preview, as the live event
// has: the session's call with the request's patch applied, as the call
// is when the snapshot is taken; from the session and from the store,
// which keeps no preview in its record.
func TestPendingPermissionsHaveTheirPreview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, s := storedSession(t, Options{}, acpjson.V2)
	up := toolUpdate("c", "in_progress")
	up.GetToolCallUpdate().Title = &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "edit main.go"}}
	update(t, s, []agent.Update{{Update: up}})
	if _, _, err := s.RequestPermission([]byte(`{"toolCall":{"toolCallId":"c","kind":"edit"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"}]}`)); err != nil {
		t.Fatal(err)
	}
	update(t, s, []agent.Update{{Update: toolUpdate("c", "completed")}})
	// The store's record of a session whose agent is gone keeps no
	// request waiting: say it runs, as its gateway would.
	if err := st.SetState(ctx, "s1", statestore.StateReady, ""); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := storedSnapshot(ctx, st, rec)
	if err != nil {
		t.Fatal(err)
	}
	for when, snap := range map[string]*acpv2.SessionSnapshot{"live": s.Snapshot(), "stored": stored} {
		pend := snap.GetPendingPermissions()
		if len(pend) != 1 {
			t.Fatalf("%s: pending %v", when, pend)
		}
		pv := pend[0].GetPreview()
		if pv.GetToolCallId() != "c" || pv.GetTitle() != "edit main.go" || pv.GetKind() != "edit" || pv.GetStatus() != "completed" {
			t.Errorf("%s: preview %v, want the call as it is now with the request's kind", when, pv)
		}
		if pend[0].GetToolCall().GetKind().GetValue() != "edit" || len(pend[0].GetOptions()) != 1 {
			t.Errorf("%s: the request lost its own fields: %v", when, pend[0])
		}
	}
	calls, _, err := st.ToolCalls(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	_, state, err := sessionstate.FromCalls(calls)
	if err != nil {
		t.Fatal(err)
	}
	var inRecord acpv2.SessionSnapshot
	state.Fill(&inRecord)
	if p := inRecord.GetPendingPermissions(); len(p) != 1 || p[0].GetPreview() != nil {
		t.Errorf("the stored record's pending requests: %v, want one without a preview", p)
	}
	s.mu.Lock()
	var kept acpv2.SessionSnapshot
	s.sstate.Fill(&kept)
	s.mu.Unlock()
	if p := kept.GetPendingPermissions(); len(p) != 1 || p[0].GetPreview() != nil {
		t.Errorf("a snapshot changed the session's state: %v", p)
	}
}

// A session whose stored state record cannot be read is listed without
// its state, and the user's other sessions are listed whole: one bad
// record does not fail ListSessions.
func TestSummariesListASessionWhoseStateIsCorrupt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := statestore.NewMemory(statestore.Options{})
	var st sessionstate.State
	st.Apply(&acpv2.SessionEvent{Event: &acpv2.SessionEvent_SessionInfoUpdate{SessionInfoUpdate: &acpv2.SessionInfoUpdate{
		Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "Fix the build"}}}}})
	good, err := st.Record()
	if err != nil {
		t.Fatal(err)
	}
	// The record's shape, with a body that is no message.
	bad := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), sessionstate.RecordID)
	bad = protowire.AppendBytes(protowire.AppendTag(bad, 1000, protowire.BytesType), []byte{0xff, 0xff, 0xff})
	for id, record := range map[string][]byte{"good": good, "bad": bad} {
		if err := mem.CreateSession(ctx, &statestore.Session{ID: id, Agent: "a", State: statestore.StateAgentLost, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ev := &acpv2.SessionEvent{Seq: 1, Time: timestamppb.New(time.Unix(1e9, 0)), Event: &acpv2.SessionEvent_StateChanged{
			StateChanged: &acpv2.SessionStateChanged{State: "ready"}}}
		if err := mem.Append(ctx, id, storetest.Encode(t, ev), []statestore.Call{{ID: sessionstate.RecordID, Proto: record}}); err != nil {
			t.Fatal(err)
		}
	}
	m := NewManager(Options{Store: mem, IdleTimeout: -1})
	defer m.Close()
	sums, err := m.Summaries(ctx, "")
	if err != nil {
		t.Fatalf("Summaries: %v", err)
	}
	got := map[string]*acpv2.SessionSummary{}
	for _, s := range sums {
		got[s.GetSessionId()] = s
	}
	if len(got) != 2 || got["good"].GetTitle() != "Fix the build" || got["bad"].GetAgent() != "a" || got["bad"].GetLastSeq() != 1 {
		t.Fatalf("summaries %v, want both sessions, the good one with its title", sums)
	}
}
