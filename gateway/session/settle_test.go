package session

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// TestSweepEndsTheTurnOfADeadReplica: a replica that finds the lease of a
// live session lapsed records, after the agent's loss, the end of the turn
// the dead replica left running.
func TestSweepEndsTheTurnOfADeadReplica(t *testing.T) {
	st := newSharedMemory()
	m := NewManager(Options{Store: st, Replica: "b", IdleTimeout: -1, LeaseTTL: time.Hour})
	defer m.Close()
	ctx := context.Background()
	rec := &statestore.Session{ID: "s1", Agent: "x", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	started := &acpv2.SessionEvent{Seq: 1, Time: timestamppb.Now(), Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{}}}
	if err := st.Append(ctx, "s1", storetest.Encode(t, started), nil); err != nil {
		t.Fatal(err)
	}
	m.sweepOrphans(ctx)
	events, err := decoded(t)(st.Events(ctx, "s1", 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].GetStateChanged().GetState() != string(statestore.StateAgentLost) ||
		events[1].GetTurnEnded().GetCause() != CauseGatewayLost || events[1].GetTurnEnded().GetStopReason() != "cancelled" {
		t.Fatalf("events after the turn's start %v, want the agent's loss, then the turn's end (cancelled, %s)", events, CauseGatewayLost)
	}
	// Settling it again (a restore) finds nothing left to do.
	if err := m.settle(ctx, mustGet(t, st, "s1"), detailGatewayGone); err != nil {
		t.Fatal(err)
	}
	if rec := mustGet(t, st, "s1"); rec.LastSeq != 3 {
		t.Fatalf("settling again appended: last seq %d, want 3", rec.LastSeq)
	}
}

func mustGet(t *testing.T, st statestore.Store, id string) *statestore.Session {
	t.Helper()
	rec, err := st.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
