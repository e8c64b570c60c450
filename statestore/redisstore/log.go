package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Append implements statestore.Store, in one script: the events and tool
// calls are stored together or not at all.
//
// One case differs from statestore.Memory: when every event is stored
// already, byte for byte (the writer retries an append whose reply it
// lost, say to a dropped connection), Append does nothing and returns
// nil. Other events with taken seqs fail with ErrSeqConflict.
func (s *Store) Append(ctx context.Context, id string, events []*encoded.Event, changed []statestore.Call) error {
	var first uint64
	if len(events) > 0 {
		first = events[0].Seq()
		// Consecutive among themselves; the script checks they follow the log.
		if err := statestore.CheckSeqs(first-1, events); err != nil {
			return err
		}
	}
	args := make([]any, 0, 4+len(events)+2*len(changed))
	args = append(args, len(events), strconv.FormatUint(first, 10), s.opts.MaxEvents, s.opts.MaxEventBytes)
	for _, e := range events {
		args = append(args, e.Proto())
	}
	for _, c := range changed {
		args = append(args, c.ID, c.Proto)
	}
	reply, err := appendScript.Run(ctx, s.rdb, s.keys(id).data(), args...).Int64Slice()
	if err != nil {
		return failed("append to", id, err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("redisstore: append to session %s: unexpected reply %v", id, reply)
	}
	switch reply[0] {
	case appendDone, appendStored:
		return nil
	case appendNotFound:
		return notFound(id)
	default:
		return fmt.Errorf("%w: session %s: got seq %d, want %d", statestore.ErrSeqConflict, id, first, reply[1]+1)
	}
}

// Events implements statestore.Store. It reads the record and the events
// in one script, so they agree.
func (s *Store) Events(ctx context.Context, id string, after uint64, limit int) ([]*encoded.Event, error) {
	k := s.keys(id)
	blobs, trimmed, err := s.read(ctx, id, eventsScript, []string{k.rec, k.ev},
		strconv.FormatUint(after, 10), "("+streamID(after), max(limit, 0))
	if err != nil {
		if errors.Is(err, errTrimmed) {
			err = statestore.TrimmedError(id, trimmed, after)
		}
		return nil, err
	}
	var out []*encoded.Event
	for _, blob := range blobs {
		e, err := encoded.Decode([]byte(blob))
		if err != nil {
			return nil, fmt.Errorf("redisstore: corrupt event after seq %d of session %s: %w", after, id, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// errTrimmed is what read returns when eventsScript finds the events
// asked for trimmed.
var errTrimmed = errors.New("trimmed")

// read runs eventsScript, toolCallsScript or toolCallScript, and returns
// the bytes they read and the number that comes with them. It fails with
// errTrimmed when the script says so.
func (s *Store) read(ctx context.Context, id string, script *redis.Script, keys []string, args ...any) ([]string, uint64, error) {
	reply, err := script.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, 0, failed("read", id, err)
	}
	if len(reply) == 0 {
		return nil, 0, fmt.Errorf("redisstore: read session %s: empty reply", id)
	}
	switch reply[0] {
	case int64(readNotFound):
		return nil, 0, notFound(id)
	case int64(readDone), int64(readTrimmed):
	default:
		return nil, 0, fmt.Errorf("redisstore: read session %s: unexpected reply %v", id, reply[0])
	}
	if len(reply) < 2 {
		return nil, 0, fmt.Errorf("redisstore: read session %s: short reply", id)
	}
	n, err := strconv.ParseUint(fmt.Sprint(reply[1]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("redisstore: corrupt record of session %s: %w", id, err)
	}
	if reply[0] == int64(readTrimmed) {
		return nil, n, errTrimmed
	}
	out := make([]string, len(reply)-2)
	for i, v := range reply[2:] {
		out[i], _ = v.(string)
	}
	return out, n, nil
}

// streamID is the stream entry id of the event with seq.
func streamID(seq uint64) string { return strconv.FormatUint(seq, 10) + "-0" }

// WaitEvents implements statestore.Store. It blocks in XREAD on the
// session's stream, so it sees appends from every Store on the same Redis,
// a second at a time; in between it checks that the session still
// exists. It returns as soon as ctx ends.
func (s *Store) WaitEvents(ctx context.Context, id string, after uint64) error {
	k := s.keys(id)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		last, err := s.rdb.HGet(ctx, k.rec, fLast).Uint64()
		switch {
		case errors.Is(err, redis.Nil):
			return notFound(id)
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return failed("wait for events of", id, err)
		case last > after:
			return nil
		}
		if err := s.block(ctx, k.ev, after); err != nil {
			return err
		}
	}
}

// block waits up to waitSlice for an entry after seq in stream, or until
// ctx ends. It returns ctx's error then, and nil otherwise, for the caller
// to check the log again: when an entry came, when none did, and when the
// read failed (a dropped connection, no free connection): the check, with
// its retries, reports a Redis that stays unreachable.
func (s *Store) block(ctx context.Context, stream string, seq uint64) error {
	done := make(chan error, 1)
	// A blocked read cannot be called off: when ctx ends first, it goes on
	// in the background for the rest of its slice.
	go func() {
		done <- s.waits.XRead(ctx, &redis.XReadArgs{
			Streams: []string{stream, streamID(seq)}, Count: 1, Block: waitSlice,
		}).Err()
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-done:
		if err != nil && !errors.Is(err, redis.Nil) {
			// Not in a tight loop while Redis is away.
			return sleep(ctx, 100*time.Millisecond)
		}
		return nil
	}
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ToolCalls implements statestore.Store. The calls and the seq are read
// in one script, so they agree.
func (s *Store) ToolCalls(ctx context.Context, id string) ([]*acpv2.ToolCall, uint64, error) {
	k := s.keys(id)
	blobs, last, err := s.read(ctx, id, toolCallsScript, []string{k.rec, k.tc, k.tco})
	if err != nil {
		return nil, 0, err
	}
	var out []*acpv2.ToolCall
	for _, b := range blobs {
		tc := &acpv2.ToolCall{}
		if err := proto.Unmarshal([]byte(b), tc); err != nil {
			return nil, 0, fmt.Errorf("redisstore: corrupt tool call of session %s: %w", id, err)
		}
		out = append(out, tc)
	}
	return out, last, nil
}

// ToolCall implements statestore.Store. The call and the seq are read in
// one script, so they agree.
func (s *Store) ToolCall(ctx context.Context, id, callID string) (*acpv2.ToolCall, uint64, error) {
	k := s.keys(id)
	blobs, last, err := s.read(ctx, id, toolCallScript, []string{k.rec, k.tc}, callID)
	if err != nil || len(blobs) == 0 {
		return nil, last, err
	}
	tc := &acpv2.ToolCall{}
	if err := proto.Unmarshal([]byte(blobs[0]), tc); err != nil {
		return nil, 0, fmt.Errorf("redisstore: corrupt tool call %q of session %s: %w", callID, id, err)
	}
	return tc, last, nil
}
