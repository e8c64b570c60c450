// Package redisstore is a statestore.Store and statestore.Leaser kept in
// Redis (6.2 or later), for gateway replicas that share their sessions.
//
// Every key starts with Options.Prefix (P below, "acpgw:" by default), so
// deployments and tests can share one Redis database. A session id is
// written in braces, as a hash tag, so all of one session's keys fall in
// the same slot:
//
//	P + "epoch"                 string: a random value set when the store is first
//	                            opened; a Redis that lost its data lost it too
//	P + "created"               string: counter that numbers sessions in creation order
//	P + "sessions"              sorted set: every session id, scored by its number
//	P + "o:" + owner            sorted set: owner's session ids, scored likewise
//	P + "ended"                 sorted set: the closed sessions' ids, scored by when
//	                            they closed (microseconds, Redis's clock)
//	P + "s:{" + id + "}:rec"    hash: the session record (fields id, owner, agent,
//	                            cwd, state, detail, asid, pv, created, last, trimmed,
//	                            changed, and bytes and cbytes, the lengths of the
//	                            kept events and of the tool calls)
//	P + "s:{" + id + "}:ev"     stream: the event log; the event with seq n is the
//	                            entry "n-0", its protobuf bytes in field "e"
//	P + "s:{" + id + "}:tc"     hash: tool call id -> protobuf bytes of the merged call
//	P + "s:{" + id + "}:tco"    list: tool call ids in first-seen order
//	P + "s:{" + id + "}:lease"  string: the lease holder, expiring with the lease
//
// Append is one Lua script, so a batch is stored whole or not at all and
// a second writer is refused. Closing a session gives its keys a time to
// live (Options.EndedTTL); the sorted sets drop the ids of sessions whose
// keys expired when ListSessions next meets them. Closing a session also
// enters it in the ended set and, past statestore.Options.MaxEndedSessions,
// deletes the sessions that closed first, in the same script: its work
// does not grow with the number of closed sessions. Sessions closed by a
// gateway that did not keep the ended set are entered in it by Open.
package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// Options are the settings of a Redis store.
type Options struct {
	statestore.Options
	// Prefix starts every key the store uses; stores with different
	// prefixes share a Redis database without seeing each other. Empty
	// means "acpgw:".
	Prefix string
	// EndedTTL is how long a closed session's keys live after SetState
	// closes it. Zero means 24 hours; a negative value keeps them forever.
	EndedTTL time.Duration
	// WaitConns caps the connections WaitEvents holds for its blocking
	// reads. They come from a pool of their own, so watchers never take
	// the connections other operations need; watchers beyond the cap take
	// turns, each blocking at most a second at a time. Zero means 1000.
	WaitConns int
}

const (
	defaultPrefix    = "acpgw:"
	defaultEndedTTL  = 24 * time.Hour
	defaultWaitConns = 1000
	// waitSlice bounds one blocking read, so that WaitEvents notices a
	// deleted session, and a waiter short of a connection gets one.
	waitSlice = time.Second
)

// Store is a statestore.Store and statestore.Leaser on Redis. Any number of
// Stores, in any number of processes, may be open on the same Redis and
// prefix at once. It is safe for concurrent use.
type Store struct {
	rdb      *redis.Client // every command but WaitEvents' blocking reads
	waits    *redis.Client // WaitEvents' blocking reads
	prefix   string
	opts     statestore.Options
	endedTTL time.Duration

	// epoch is the value of the epoch key this store trusts.
	mu    sync.Mutex
	epoch string
}

var (
	_ statestore.Store  = (*Store)(nil)
	_ statestore.Leaser = (*Store)(nil)
	_ statestore.Pinger = (*Store)(nil)
)

// Open connects to the Redis at url, redis://[user:password@]HOST:PORT/DB
// (rediss:// for TLS; go-redis query parameters such as pool_size or
// max_retries are honoured), and checks that it answers.
//
// Unless the URL sets them, commands are retried up to 16 times, with a
// backoff from 10ms growing to 1s, so a dropped connection, or a Redis
// that restarts within about ten seconds, is ridden out rather than
// reported.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	return open(ctx, url, opts, nil)
}

// open is Open with a hook that adjusts the client options, for tests.
func open(ctx context.Context, rawURL string, opts Options, tweak func(*redis.Options)) (*Store, error) {
	shown, ro, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if ro.MaxRetries == 0 {
		ro.MaxRetries = 16
	}
	if ro.MinRetryBackoff == 0 {
		ro.MinRetryBackoff = 10 * time.Millisecond
	}
	if ro.MaxRetryBackoff == 0 {
		ro.MaxRetryBackoff = time.Second
	}
	// A caller's deadline bounds the command too.
	ro.ContextTimeoutEnabled = true
	if tweak != nil {
		tweak(ro)
	}

	wo := *ro
	wo.PoolSize = opts.WaitConns
	if wo.PoolSize <= 0 {
		wo.PoolSize = defaultWaitConns
	}
	wo.MinIdleConns, wo.MaxIdleConns, wo.MaxActiveConns = 0, 0, 0
	wo.ConnMaxIdleTime = time.Minute
	// A waiter short of a connection gives up its turn after one slice and
	// checks the log again; it does not pile up retries. WaitEvents rides
	// out connection errors itself.
	wo.PoolTimeout = waitSlice
	wo.MaxRetries = -1
	wo.ContextTimeoutEnabled = false

	s := &Store{
		rdb:      redis.NewClient(ro),
		waits:    redis.NewClient(&wo),
		prefix:   opts.Prefix,
		opts:     opts.Options,
		endedTTL: opts.EndedTTL,
	}
	if s.prefix == "" {
		s.prefix = defaultPrefix
	}
	if s.endedTTL == 0 {
		s.endedTTL = defaultEndedTTL
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.Close()
		return nil, fmt.Errorf("redisstore: cannot reach Redis at %s: %w", shown, err)
	}
	if err := s.AcceptLoss(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.adoptEnded(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ParseURL checks a redis:// or rediss:// URL as Open would, and returns it
// with its password hidden (for messages and logs) and the client options
// it names. Its errors never show the password.
func ParseURL(rawURL string) (shown string, opts *redis.Options, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue names the URL, password and all
		}
		if _, escape := errors.AsType[url.EscapeError](err); escape {
			// It quotes the escape, which may be part of the password.
			err = errors.New("a % is not followed by two hex digits (escape a % in the password as %25)")
		}
		return "", nil, fmt.Errorf("redisstore: bad Redis URL: %w", err)
	}
	shown = u.Redacted()
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", nil, fmt.Errorf("redisstore: Redis URL %s has scheme %q, want redis:// or rediss://", shown, u.Scheme)
	}
	if opts, err = redis.ParseURL(rawURL); err != nil {
		return "", nil, fmt.Errorf("redisstore: bad Redis URL %s: %w", shown, err)
	}
	return shown, opts, nil
}

// Ping implements statestore.Pinger: it reads the epoch key, which fails
// when Redis does not answer, and is gone or changed when Redis lost its
// data (a restart without persistence, a FLUSHALL, an eviction).
func (s *Store) Ping(ctx context.Context) error {
	got, err := s.rdb.Get(ctx, s.epochKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisstore: Redis does not answer: %w", err)
	}
	s.mu.Lock()
	want := s.epoch
	s.mu.Unlock()
	if got != want {
		return fmt.Errorf("%w: Redis no longer holds the key %s this gateway set (it restarted without its data, or was flushed): the sessions it held may be gone", statestore.ErrDataLost, s.epochKey())
	}
	return nil
}

// AcceptLoss implements statestore.Pinger: it trusts the epoch Redis
// holds now, setting one if it holds none.
func (s *Store) AcceptLoss(ctx context.Context) error {
	epoch, err := epochScript.Run(ctx, s.rdb, []string{s.epochKey()}, rand.Text()).Text()
	if err != nil {
		return fmt.Errorf("redisstore: reading the store's epoch: %w", err)
	}
	s.mu.Lock()
	s.epoch = epoch
	s.mu.Unlock()
	return nil
}

// Close implements statestore.Store. It closes the store's connections;
// what is stored stays in Redis.
func (s *Store) Close() error {
	return errors.Join(s.rdb.Close(), s.waits.Close())
}

// sessionKeys are the keys of one session.
type sessionKeys struct {
	rec, ev, tc, tco, lease string
}

func (s *Store) keys(id string) sessionKeys {
	base := s.prefix + "s:{" + id + "}:"
	return sessionKeys{rec: base + "rec", ev: base + "ev", tc: base + "tc", tco: base + "tco", lease: base + "lease"}
}

// data lists the keys that hold the session's data, the record first.
func (k sessionKeys) data() []string { return []string{k.rec, k.ev, k.tc, k.tco} }

func (s *Store) epochKey() string { return s.prefix + "epoch" }

func (s *Store) counterKey() string { return s.prefix + "created" }

func (s *Store) allKey() string { return s.prefix + "sessions" }

func (s *Store) endedKey() string { return s.prefix + "ended" }

func (s *Store) ownerKey(owner string) string { return s.prefix + "o:" + owner }

// indexKeys returns the sorted sets that list a session of owner.
func (s *Store) indexKeys(owner string) []string {
	if owner == "" {
		return []string{s.allKey()}
	}
	return []string{s.allKey(), s.ownerKey(owner)}
}

// Session record hash fields.
const (
	fID      = "id"
	fOwner   = "owner"
	fAgent   = "agent"
	fCwd     = "cwd"
	fState   = "state"
	fDetail  = "detail"
	fASID    = "asid"
	fPV      = "pv"
	fMCP     = "mcp"
	fCreated = "created"
	fLast    = "last"
	fTrimmed = "trimmed"
	fChanged = "changed"
	// fBytes and fCallBytes are the lengths of the kept events and of
	// the tool calls, which the append script keeps.
	fBytes     = "bytes"
	fCallBytes = "cbytes"
)

// recordFields returns the hash fields and values of a session record.
func recordFields(r *statestore.Session) []any {
	return []any{
		fID, r.ID, fOwner, r.Owner, fAgent, r.Agent, fCwd, r.Cwd,
		fState, string(r.State), fDetail, r.Detail,
		fASID, r.AgentSessionID, fPV, strconv.Itoa(r.ProtocolVersion), fMCP, string(r.MCPServers),
		fCreated, r.CreatedAt.Format(time.RFC3339Nano),
		fLast, strconv.FormatUint(r.LastSeq, 10), fTrimmed, strconv.FormatUint(r.TrimmedSeq, 10),
	}
}

// parseRecord reads back a record hash; it returns nil, nil for an empty
// one (the session does not exist).
func parseRecord(h map[string]string) (*statestore.Session, error) {
	if len(h) == 0 {
		return nil, nil
	}
	r := &statestore.Session{
		ID: h[fID], Owner: h[fOwner], Agent: h[fAgent], Cwd: h[fCwd],
		State: statestore.State(h[fState]), Detail: h[fDetail], AgentSessionID: h[fASID],
	}
	if v := h[fMCP]; v != "" {
		r.MCPServers = []byte(v)
	}
	var errs []error
	var err error
	r.ProtocolVersion, err = strconv.Atoi(h[fPV])
	errs = append(errs, err)
	r.CreatedAt, err = time.Parse(time.RFC3339Nano, h[fCreated])
	errs = append(errs, err)
	r.LastSeq, err = strconv.ParseUint(h[fLast], 10, 64)
	errs = append(errs, err)
	r.TrimmedSeq, err = strconv.ParseUint(h[fTrimmed], 10, 64)
	errs = append(errs, err)
	if v := h[fChanged]; v != "" {
		r.StateChangedAt, err = time.Parse(time.RFC3339Nano, v)
		errs = append(errs, err)
	}
	for _, f := range []string{fBytes, fCallBytes} {
		if v := h[f]; v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			r.Bytes += n
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redisstore: corrupt record of session %s: %w", r.ID, err)
	}
	return r, nil
}

func notFound(id string) error { return fmt.Errorf("%w: %s", statestore.ErrNotFound, id) }

// failed wraps a Redis error with what the store was doing.
func failed(op, id string, err error) error {
	return fmt.Errorf("redisstore: %s session %s: %w", op, id, err)
}
