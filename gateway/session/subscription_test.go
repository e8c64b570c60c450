package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/statestore"
)

func testSession(t *testing.T, buffer int) *Session {
	t.Helper()
	m := NewManager(Options{WatchBuffer: buffer, IdleTimeout: -1})
	rec := &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", CreatedAt: time.Now()}
	if err := m.opts.Store.CreateSession(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return newSession(m, rec, nil)
}

func emitText(t *testing.T, s *Session, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		ev := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: fmt.Sprint(i)}}}}}}
		if err := s.emitLocked([]*acpv2.SessionEvent{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLaggingWatcherIsCutOffWithoutBlocking(t *testing.T) {
	t.Parallel()
	s := testSession(t, 4)
	slow := s.Watch(0)
	fast := s.Watch(0)
	ctx := context.Background()

	got := make(chan []uint64)
	go func() {
		var seqs []uint64
		for len(seqs) < 10 {
			ev, err := fast.Next(ctx)
			if err != nil {
				break
			}
			seqs = append(seqs, ev.GetSeq())
		}
		got <- seqs
	}()
	// Emitting never waits for the slow watcher; the fast one keeps up as
	// long as it reads (emit in steps it can follow).
	for i := 0; i < 5; i++ {
		emitText(t, s, 2)
		time.Sleep(10 * time.Millisecond)
	}
	if seqs := <-got; len(seqs) != 10 || seqs[9] != 10 {
		t.Fatalf("the reading watcher got %v", seqs)
	}

	// The slow one gets what fit in its buffer, in order, then the error.
	for want := uint64(1); want <= 4; want++ {
		ev, err := slow.Next(ctx)
		if err != nil || ev.GetSeq() != want {
			t.Fatalf("slow watcher: event %v, err %v, want seq %d", ev, err, want)
		}
	}
	if _, err := slow.Next(ctx); !errors.Is(err, ErrLagging) {
		t.Fatalf("slow watcher: err = %v, want ErrLagging", err)
	}
	if slow.LastSeq() != 4 {
		t.Fatalf("LastSeq = %d, want 4 (the afterSeq to resume from)", slow.LastSeq())
	}

	// Resuming from there replays the rest from the store, then goes live.
	resumed := s.Watch(slow.LastSeq())
	for want := uint64(5); want <= 10; want++ {
		ev, err := resumed.Next(ctx)
		if err != nil || ev.GetSeq() != want {
			t.Fatalf("resumed watcher: event %v, err %v, want seq %d", ev, err, want)
		}
	}
	emitText(t, s, 1)
	if ev, err := resumed.Next(ctx); err != nil || ev.GetSeq() != 11 {
		t.Fatalf("resumed watcher live: %v, %v", ev, err)
	}
}

func TestReplayLongerThanOnePage(t *testing.T) {
	t.Parallel()
	s := testSession(t, 8)
	emitText(t, s, replayPage*2+7)
	sub := s.Watch(3)
	for want := uint64(4); want <= replayPage*2+7; want++ {
		ev, err := sub.Next(context.Background())
		if err != nil || ev.GetSeq() != want {
			t.Fatalf("event %v, err %v, want seq %d", ev, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the end: %v, want to wait for live events", err)
	}
}
