package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// listChunk is how many records ListSessions reads per round trip.
const listChunk = 256

// CreateSession implements statestore.Store.
func (s *Store) CreateSession(ctx context.Context, sess *statestore.Session) error {
	k := s.keys(sess.ID)
	keys := append(k.data(), s.counterKey(), s.endedKey())
	keys = append(keys, s.indexKeys(sess.Owner)...)
	args := append([]any{sess.ID}, recordFields(sess)...)
	n, err := createScript.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return failed("create", sess.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", statestore.ErrExists, sess.ID)
	}
	return nil
}

// GetSession implements statestore.Store.
func (s *Store) GetSession(ctx context.Context, id string) (*statestore.Session, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys(id).rec).Result()
	if err != nil {
		return nil, failed("read", id, err)
	}
	rec, err := parseRecord(h)
	if err == nil && rec == nil {
		err = notFound(id)
	}
	return rec, err
}

// ListSessions implements statestore.Store. Index entries of sessions
// whose keys expired are dropped on the way.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]*statestore.Session, error) {
	index := s.allKey()
	if owner != "" {
		index = s.ownerKey(owner)
	}
	ids, err := s.rdb.ZRange(ctx, index, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: list sessions: %w", err)
	}
	var out []*statestore.Session
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), listChunk)]
		ids = ids[len(chunk):]
		recs, err := s.records(ctx, index, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// records reads the records of ids, listed in index, in order; it drops
// the ids of those that are gone from index.
func (s *Store) records(ctx context.Context, index string, ids []string) ([]*statestore.Session, error) {
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.keys(id).rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: list sessions: %w", err)
	}
	var out []*statestore.Session
	gone, goneKeys := []any{}, []string{index}
	for i, cmd := range cmds {
		rec, err := parseRecord(cmd.Val())
		if err != nil {
			return nil, err
		}
		if rec == nil {
			gone = append(gone, ids[i])
			goneKeys = append(goneKeys, s.keys(ids[i]).rec)
			continue
		}
		out = append(out, rec)
	}
	if len(gone) > 0 {
		if err := pruneScript.Run(ctx, s.rdb, goneKeys, gone...).Err(); err != nil {
			return nil, fmt.Errorf("redisstore: list sessions: %w", err)
		}
	}
	return out, nil
}

// SetState implements statestore.Store. Closing a session starts the time
// to live of its keys (Options.EndedTTL); any other state makes them
// permanent again. Closing one enters it in the ended set, and deletes
// the sessions that closed first past MaxEndedSessions, in the same
// script (setStateScript).
func (s *Store) SetState(ctx context.Context, id string, state statestore.State, detail string) error {
	ttl, closing := int64(-1), 0
	if state == statestore.StateClosed {
		ttl, closing = 0, 1
		if s.endedTTL > 0 {
			ttl = max(s.endedTTL.Milliseconds(), 1)
		}
	}
	keys := append(s.keys(id).data(), s.endedKey(), s.allKey())
	n, err := setStateScript.Run(ctx, s.rdb, keys, ttl, closing, s.opts.MaxEndedSessions, s.prefix, id,
		fState, string(state), fDetail, detail, fChanged, time.Now().UTC().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return failed("update", id, err)
	}
	if n == 0 {
		return notFound(id)
	}
	return nil
}

// SetAgentSession implements statestore.Store.
func (s *Store) SetAgentSession(ctx context.Context, id, agentSessionID string, protocolVersion int) error {
	return s.update(ctx, id, 0, fASID, agentSessionID, fPV, protocolVersion)
}

// update runs updateScript: see there for ttl.
func (s *Store) update(ctx context.Context, id string, ttl int64, fields ...any) error {
	n, err := updateScript.Run(ctx, s.rdb, s.keys(id).data(), append([]any{ttl}, fields...)...).Int()
	if err != nil {
		return failed("update", id, err)
	}
	if n == 0 {
		return notFound(id)
	}
	return nil
}

// DeleteSession implements statestore.Store. It removes the session's lease
// too.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	k := s.keys(id)
	owner, err := s.rdb.HGet(ctx, k.rec, fOwner).Result()
	if errors.Is(err, redis.Nil) {
		return notFound(id)
	}
	if err != nil {
		return failed("delete", id, err)
	}
	// Should the session be replaced by one of another owner meanwhile,
	// that owner's index keeps a stale entry, which ListSessions drops.
	keys := append(k.data(), k.lease, s.endedKey())
	keys = append(keys, s.indexKeys(owner)...)
	n, err := deleteScript.Run(ctx, s.rdb, keys, id).Int()
	if err != nil {
		return failed("delete", id, err)
	}
	if n == 0 {
		return notFound(id)
	}
	return nil
}

// adoptChunk is how many closed sessions adoptEnded enters per script.
const adoptChunk = 256

// adoptEnded enters in the ended set the closed sessions that are not in
// it, those closed by a gateway that did not keep it, scored by when they
// closed (StateChangedAt, or CreatedAt for a record without it), and
// trims the set to MaxEndedSessions. Open runs it, so that a store
// written by an earlier version is held to the cap from then on; it reads
// every record once. adoptScript checks again that each is closed.
func (s *Store) adoptEnded(ctx context.Context) error {
	recs, err := s.ListSessions(ctx, "")
	if err != nil {
		return fmt.Errorf("redisstore: adopting the closed sessions: %w", err)
	}
	var args []any
	for _, r := range recs {
		if r.State != statestore.StateClosed {
			continue
		}
		at := r.StateChangedAt
		if at.IsZero() {
			at = r.CreatedAt
		}
		args = append(args, r.ID, at.UnixMicro())
	}
	// One run even with none, to trim a set kept under a larger cap.
	for first := true; first || len(args) > 0; first = false {
		chunk := args[:min(len(args), 2*adoptChunk)]
		args = args[len(chunk):]
		err := adoptScript.Run(ctx, s.rdb, []string{s.endedKey(), s.allKey()},
			append([]any{s.opts.MaxEndedSessions, s.prefix}, chunk...)...).Err()
		if err != nil {
			return fmt.Errorf("redisstore: adopting the closed sessions: %w", err)
		}
	}
	return nil
}
