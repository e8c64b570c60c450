package bridge

import (
	"context"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// followRetry is the pause before a follower watches again after its
// Watch failed.
const followRetry = time.Second

// follow starts following session s, with [Options.Follow], unless it is
// followed already: a Watch from the last event handled, whose events go
// to the editor as the Prompt stream's do (handleLive), until the editor
// goes or closes the session.
func (b *bridge) follow(s *session) {
	if !b.opts.Follow {
		return
	}
	s.mu.Lock()
	if s.stopFollow != nil {
		s.mu.Unlock()
		return
	}
	ctx, stop := context.WithCancel(b.base)
	s.stopFollow = stop
	s.mu.Unlock()
	if !b.spawn(func() {
		defer stop()
		b.followLoop(ctx, s)
	}) {
		stop()
	}
}

func (b *bridge) followLoop(ctx context.Context, s *session) {
	for {
		_, err := b.watchOnce(ctx, s, false)
		if ctx.Err() != nil {
			return
		}
		if !resumable(err) {
			if err != nil {
				b.log.Info("no longer following the session", "session", s.id, "error", err)
			}
			return // closed, or not the user's any more
		}
		// Cut off (lagging), or the gateway's replicas changing hands:
		// watch again from where the editor is.
		b.log.Info("following the session again", "session", s.id, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(followRetry):
		}
	}
}

// watchOnce follows session s from the last event handled until its
// Watch ends or, with untilTurnEnd, until a turn ends, whose turnEnded
// event it returns.
func (b *bridge) watchOnce(ctx context.Context, s *session, untilTurnEnd bool) (*acpv2.SessionEvent, error) {
	after := s.handled()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: s.id, AfterSeq: after}))
	if err != nil {
		return nil, err
	}
	var end *acpv2.SessionEvent
	for end == nil && stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			b.handleLive(s, ev)
			if untilTurnEnd && ev.GetTurnEnded() != nil {
				end = ev
			}
		}
	}
	if end == nil {
		err = stream.Err()
	}
	cancel() // so that Close need not wait on a live stream
	_ = stream.Close()
	return end, err
}

// handled returns the seq of the last live event of s handled, which the
// editor has.
func (s *session) handled() uint64 {
	s.out.Lock()
	defer s.out.Unlock()
	return s.lastSeq
}
