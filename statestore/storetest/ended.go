package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// endedCap is the Options.MaxEndedSessions of the ended-session tests.
const endedCap = 3

// closedIDs returns the ids of owner's closed sessions (every owner's when
// owner is empty), sorted.
func closedIDs(t testing.TB, s statestore.Store, owner string) []string {
	t.Helper()
	out, err := listClosed(s, owner)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listClosed is closedIDs for any goroutine.
func listClosed(s statestore.Store, owner string) ([]string, error) {
	list, err := s.ListSessions(context.Background(), owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range list {
		if r.State == statestore.StateClosed {
			out = append(out, r.ID)
		}
	}
	slices.Sort(out)
	return out, nil
}

// setState sets a session's state, failing the test on an error.
func setState(t testing.TB, s statestore.Store, id string, state statestore.State) {
	t.Helper()
	if err := s.SetState(context.Background(), id, state, "test"); err != nil {
		t.Fatalf("SetState(%s, %s): %v", id, state, err)
	}
}

// checkClosed fails the test unless exactly the sessions in want (sorted)
// are closed, and each session in gone is deleted, log and all.
func checkClosed(t testing.TB, s statestore.Store, what string, want []string, gone ...string) {
	t.Helper()
	if got := closedIDs(t, s, ""); !slices.Equal(got, want) {
		t.Fatalf("%s: closed sessions %v, want %v (MaxEndedSessions %d)", what, got, want, endedCap)
	}
	ctx := context.Background()
	for _, id := range gone {
		if _, err := s.GetSession(ctx, id); !errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("%s: GetSession(%s) err = %v, want ErrNotFound", what, id, err)
		}
		if _, err := s.Events(ctx, id, 0, 0); !errors.Is(err, statestore.ErrNotFound) {
			t.Fatalf("%s: Events(%s) err = %v, want ErrNotFound", what, id, err)
		}
	}
}

// testEndedCap checks Options.MaxEndedSessions (endedCap): after every
// close, exactly the sessions closed last are kept, and never more.
func testEndedCap(t *testing.T, s statestore.Store) {
	ctx := context.Background()
	for _, id := range []string{"open", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"} {
		if err := s.CreateSession(ctx, session(id, "alice")); err != nil {
			t.Fatal(err)
		}
		appendN(t, s, id, 1, 3)
	}
	setState(t, s, "open", statestore.StateReady)
	var closed []string
	for i := range 6 {
		id := fmt.Sprint("c", i)
		setState(t, s, id, statestore.StateClosed)
		closed = append(closed, id)
		kept := closed[max(0, len(closed)-endedCap):]
		checkClosed(t, s, "closing "+id, kept, closed[:len(closed)-len(kept)]...)
	}
	// c3, c4, c5 are kept. Closed again, c3 counts as closed last.
	setState(t, s, "c3", statestore.StateClosed)
	setState(t, s, "c6", statestore.StateClosed)
	checkClosed(t, s, "closing c6 after c3 again", []string{"c3", "c5", "c6"}, "c4")
	// A session that leaves the closed state no longer counts.
	setState(t, s, "c5", statestore.StateAgentLost)
	setState(t, s, "c7", statestore.StateClosed)
	checkClosed(t, s, "closing c7 after c5 left the closed state", []string{"c3", "c6", "c7"})
	// Nor does one that is deleted.
	if err := s.DeleteSession(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	setState(t, s, "c8", statestore.StateClosed)
	checkClosed(t, s, "closing c8 after c3 was deleted", []string{"c6", "c7", "c8"}, "c3")
	// The sessions that are not closed are all there, and owners' lists
	// lose the deleted ones too.
	list, err := s.ListSessions(ctx, "alice")
	if want := []string{"open", "c5", "c6", "c7", "c8"}; err != nil || !slices.Equal(ids(list), want) {
		t.Fatalf("ListSessions(alice) = %v, %v; want %v", ids(list), err, want)
	}
}

// testEndedCapConcurrent closes many sessions at once, through one store
// or two (replicas on the same data): however the closes interleave, no
// more than endedCap closed sessions are kept, and the sessions not closed
// are all kept.
func testEndedCapConcurrent(t *testing.T, a, b statestore.Store) {
	ctx := context.Background()
	const n = 24
	for i := range n {
		if err := a.CreateSession(ctx, session(fmt.Sprint("s", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.CreateSession(ctx, session("open", "")); err != nil {
		t.Fatal(err)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		firstErr  error
		mostAfter int // the most closed sessions a reader found
	)
	for i := range n {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() {
			id := fmt.Sprint("s", i)
			err := st.SetState(ctx, id, statestore.StateClosed, "")
			// What a reader finds right after a close is within the cap.
			found, lerr := listClosed(st, "")
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				err = lerr
			}
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("closing %s: %w", id, err)
			}
			mostAfter = max(mostAfter, len(found))
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if mostAfter > endedCap {
		t.Fatalf("%d closed sessions found right after a close, want at most %d", mostAfter, endedCap)
	}
	for _, st := range []statestore.Store{a, b} {
		if got := closedIDs(t, st, ""); len(got) != endedCap {
			t.Fatalf("after %d closes: closed sessions %v, want %d", n, got, endedCap)
		}
	}
	if _, err := b.GetSession(ctx, "open"); err != nil {
		t.Fatalf("the session not closed: %v", err)
	}
}

// testEndedCapRestart checks that the order of the closed sessions, and
// the cap, survive a restart.
func testEndedCapRestart(t *testing.T, s statestore.Store, reopen func(*testing.T, statestore.Store) statestore.Store) {
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := s.CreateSession(ctx, session(id, "")); err != nil {
			t.Fatal(err)
		}
	}
	// Closed in another order than created.
	for _, id := range []string{"c", "a", "b"} {
		setState(t, s, id, statestore.StateClosed)
	}
	s = reopen(t, s)
	checkClosed(t, s, "after a restart", []string{"a", "b", "c"})
	setState(t, s, "d", statestore.StateClosed)
	checkClosed(t, s, "closing d after a restart", []string{"a", "b", "d"}, "c")
	setState(t, s, "e", statestore.StateClosed)
	checkClosed(t, s, "closing e after a restart", []string{"b", "d", "e"}, "a")
}
