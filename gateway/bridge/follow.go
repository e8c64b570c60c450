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
		s.out.Lock()
		after := s.lastSeq
		s.out.Unlock()
		err := b.watchOnce(ctx, s, after)
		if ctx.Err() != nil {
			return
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeAborted,
			connect.CodeDeadlineExceeded, connect.CodeInternal, connect.CodeUnknown:
			// Cut off (lagging), or the gateway's replicas changing hands:
			// watch again from where the editor is.
			b.log.Info("following the session again", "session", s.id, "error", err)
		default:
			if err != nil {
				b.log.Info("no longer following the session", "session", s.id, "error", err)
			}
			return // closed, or not the user's any more
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(followRetry):
		}
	}
}

// watchOnce follows session s from after seq until its Watch ends.
func (b *bridge) watchOnce(ctx context.Context, s *session, after uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: s.id, AfterSeq: after}))
	if err != nil {
		return err
	}
	for stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			b.handleLive(s, ev)
		}
	}
	err = stream.Err()
	cancel()
	_ = stream.Close()
	return err
}
