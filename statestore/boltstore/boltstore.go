// Package boltstore is a statestore.Store kept in one bbolt file, for a
// gateway that runs as a single process and must not lose its sessions
// when it restarts.
//
// # Layout
//
// The file holds these top-level buckets:
//
//	meta      "version" -> format version ("1"); other versions are refused;
//	          "ended" -> big-endian count of the entries in ended;
//	          "applied" -> big-endian gen of the last write-ahead log
//	          entry applied
//	sessions  session id -> session record (JSON)
//	order     big-endian creation counter -> session id, so ListSessions
//	          returns the oldest session first
//	ended     big-endian closing counter -> id of a closed session, the
//	          first closed first; a closed session's record holds its key
//	events    session id -> bucket: big-endian seq -> acpv2.SessionEvent
//	calls     session id -> bucket: big-endian first-seen index -> acpv2.ToolCall
//	callidx   session id -> bucket: tool call id -> big-endian first-seen index
//
// Events and tool calls are stored as protobuf. The session record carries
// LastSeq and TrimmedSeq, so an Append writes its events, the tool calls
// they changed and the record's new LastSeq in one transaction. Kept seqs
// are dense: they run from TrimmedSeq+1 to LastSeq, and retention deletes
// from the low end. A session's buckets hang off shared top-level buckets
// rather than off one bucket per session, so that an Append rewrites one
// page fewer.
//
// # Appends: the write-ahead log
//
// bbolt is copy-on-write: a commit rewrites every page it touched, and
// the pages of a session's events, tool calls and record are its own, so
// that a commit of many sessions' appends writes a few pages per session
// (about 12 KiB each to store a kilobyte of events) and then waits for
// the disk twice. So Append does not commit to the file: it checks the
// events against the session (its seqs, the retention caps), writes them
// with the calls they changed to a write-ahead log next to the file
// (PATH.wal.N, see wal.go), and returns once the log is synced. The log's
// writer takes the Appends of every session that arrive while it writes
// and syncs, and writes them at once: one write and one sync for all,
// their bytes those of the events.
//
// A checkpoint applies what the log holds to the file, in one
// transaction, every second (or once the log holds 64 MiB, or when the
// store closes), then removes the log's segments it applied: a session
// that appended twenty times since the last one has its pages rewritten
// once. The file's meta bucket records the last entry applied, so Open
// applies once what a crash left in the log, and a write cut short by a
// crash (never acknowledged) is cut from the log's end. An Append that
// would drop events past the retention caps is written to the file at
// once instead, after a checkpoint; so are all other writes, which are
// rare (see "Batching").
//
// # Reads
//
// The entries logged and not yet applied are kept in memory, by session.
// A read takes a session's entries first and then opens its read
// transaction, and adds to what the file holds the entries the file does
// not hold yet (their gen is above the file's "applied") of the session's
// incarnation (its order key): a checkpoint that commits in between is
// then either seen whole in the file or not at all.
//
// # Batching
//
// Every bbolt commit waits for the disk (two fdatasyncs). So that many
// sessions writing at once do not each pay for one, the writes that do
// go to the file go through bbolt's DB.Batch, which runs the calls that
// arrive within a millisecond of each other in one transaction and
// commits them together. A write that finds no other write under way
// commits on its own straight away instead, so a lone writer does not
// wait out the batch delay.
//
// DB.Batch may run a call more than once (when another call in its batch
// fails, the batch is rolled back and run again without it), and it runs a
// call that returns an error again on its own. So a write reads everything
// it needs from the transaction each time it runs, and takes its encoded
// input ready-made. Refusals that a caller provokes (an unknown session, a
// taken id, a seq that does not follow the log) are found before the call
// writes anything and are handed back to the caller through a variable,
// with the call returning nil, so they neither fail nor re-run the other
// calls in the batch.
//
// # Closed sessions
//
// The SetState that closes a session enters it in ended and, past
// Options.MaxEndedSessions, deletes the sessions that closed first, in
// the same transaction: a lookup of the first key and a delete per
// session, whatever the number of closed sessions. A file written before
// ended was kept (or by such a gateway since) has its closed sessions
// entered by Open, by when they closed.
//
// # Owners
//
// The file belongs to one process (bbolt locks it), so the Store keeps in
// memory which sessions each owner has, built by Open from the records:
// ListSessions of an owner reads that owner's records only, not every
// record in the file.
//
// # Waiting
//
// The file belongs to one process (bbolt locks it), so WaitEvents is woken
// by the Appends of this process: each waited-on session has a channel
// that an Append or DeleteSession closes.
package boltstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// formatVersion is the version of the layout this package writes.
const formatVersion = "1"

// Bucket and key names.
var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketOrder    = []byte("order")
	bucketEvents   = []byte("events")
	bucketCalls    = []byte("calls")
	bucketCallIdx  = []byte("callidx")
	bucketEnded    = []byte("ended")
	keyVersion     = []byte("version")
	keyEnded       = []byte("ended")
	keyApplied     = []byte("applied")
)

const (
	// lockTimeout is how long Open waits for another process to release
	// the file.
	lockTimeout = 3 * time.Second
	// maxBatchDelay is how long a batched write waits for others to join
	// it.
	maxBatchDelay = 1 * time.Millisecond
	// initialMmapSize is the address space bbolt maps the file in at
	// first (not memory: pages are read in as used). A commit that grows
	// the file past its map maps it again, and waits for every read
	// transaction to end while new ones wait for it: an Append's reads
	// stalled behind each checkpoint that grew the file.
	initialMmapSize = 1 << 30
	// checkpointEvery and checkpointBytes are the defaults of the Store's
	// fields.
	checkpointEvery = time.Second
	checkpointBytes = 64 << 20
)

// errClosed is returned by every call on a closed Store.
var errClosed = errors.New("statestore: bolt store is closed")

// Store is a statestore.Store kept in a bbolt file. It is safe for
// concurrent use by the goroutines of one process; bbolt locks the file
// against other processes.
type Store struct {
	db     *bolt.DB
	path   string
	opts   statestore.Options
	closed atomic.Bool
	// writers counts the writes under way, to let a lone write skip the
	// batch delay.
	writers atomic.Int64

	mu sync.Mutex
	// waits holds a channel per session that WaitEvents waits on; the next
	// Append or DeleteSession of the session closes and removes it.
	waits map[string]chan struct{}

	ownersMu sync.Mutex
	// owners maps each owner but "" to its sessions' ids and order keys.
	// They are updated after the commit, so the updates of an id deleted
	// and created again may arrive out of order: the order key (new for
	// each create) tells the incarnations apart. An entry may outlive its
	// session when a delete's update comes before its create's; listOwned
	// skips it.
	owners map[string]map[string]uint64
	// unreadable holds the ids of the records Open could not decode: their
	// owner is unknown, so listing any owner's sessions reports them.
	unreadable map[string]bool

	// log is the write-ahead log of the Appends; pend holds those logged
	// and not yet applied to the bbolt file, which reads add to what the
	// file holds.
	log  *wal
	pend pending
	// applyMu makes one checkpoint at a time.
	applyMu sync.Mutex
	// live is held for reading by each Append under way, and for
	// writing by Close, which so waits for them.
	live sync.RWMutex
	// locks holds a lock per session with an Append under way, so that a
	// session's Appends check their seqs one after another.
	locksMu sync.Mutex
	locks   map[string]*sessionLock
	// records holds the last record readRecord decoded of each session.
	recordsMu sync.Mutex
	records   map[string]decodedRecord
	// checkpointEvery and checkpointBytes say when the log's entries are
	// applied to the bbolt file: this often, or once they hold this many
	// bytes.
	checkpointEvery time.Duration
	checkpointBytes int64
	full            chan struct{}
	stopCheckpoints chan struct{}
	checkpointsDone chan struct{}
}

var _ statestore.Store = (*Store)(nil)

// Open opens the store in the bbolt file at path, creating the file and
// its parent directories when they are missing. It fails after a few
// seconds when another process holds the file.
func Open(path string, opts statestore.Options) (*Store, error) {
	return openWith(path, opts, logOptions{})
}

// logOptions are the settings of the store's log that tests change.
type logOptions struct {
	// openSegment creates a segment (nil: a file).
	openSegment func(path string) (walFile, error)
	// every and bytes override checkpointEvery and checkpointBytes.
	every time.Duration
	bytes int64
}

// openWith opens the store with its log's settings.
func openWith(path string, opts statestore.Options, lo logOptions) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("statestore: create directory for bolt file: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, InitialMmapSize: initialMmapSize})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("statestore: bolt file %s is locked by another process", path)
	}
	if err != nil {
		return nil, fmt.Errorf("statestore: open bolt file %s: %w", path, err)
	}
	db.MaxBatchDelay = maxBatchDelay
	s := &Store{
		db: db, path: path, opts: opts, waits: map[string]chan struct{}{},
		owners: map[string]map[string]uint64{}, unreadable: map[string]bool{},
		pend: pending{by: map[string][]*entry{}}, locks: map[string]*sessionLock{}, records: map[string]decodedRecord{},
		checkpointEvery: cmp.Or(lo.every, checkpointEvery), checkpointBytes: cmp.Or(lo.bytes, checkpointBytes),
		full: make(chan struct{}, 1), stopCheckpoints: make(chan struct{}), checkpointsDone: make(chan struct{}),
	}
	if err := s.prepare(lo.openSegment); err != nil {
		db.Close()
		return nil, fmt.Errorf("statestore: bolt file %s: %w", path, err)
	}
	go s.checkpoints()
	return s, nil
}

// prepare readies a store just opened: checks the file's version, applies
// what its log holds, indexes its sessions, and starts its log.
func (s *Store) prepare(openSegment func(string) (walFile, error)) error {
	if err := s.db.Update(initialize); err != nil {
		return err
	}
	seg, gen, err := s.replay()
	if err != nil {
		return err
	}
	if err := s.db.View(s.indexOwners); err != nil {
		return err
	}
	var gone []deleted
	if err := s.db.Update(func(tx *bolt.Tx) (err error) {
		gone, err = s.indexEnded(tx)
		return err
	}); err != nil {
		return err
	}
	s.forgetDeleted(gone)
	s.log, err = startWAL(s.path, seg, gen, openSegment, s.logged)
	return err
}

// initialize checks the format version of the file, and creates the
// top-level buckets of a new file.
func initialize(tx *bolt.Tx) error {
	if meta := tx.Bucket(bucketMeta); meta != nil {
		if v := meta.Get(keyVersion); string(v) != formatVersion {
			return fmt.Errorf("unknown format version %q (this gateway reads version %s)", v, formatVersion)
		}
	} else {
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			return fmt.Errorf("not a gateway state file: it has bucket %q but no format version", name)
		}); err != nil {
			return err
		}
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyVersion, []byte(formatVersion)); err != nil {
			return err
		}
	}
	for _, name := range append([][]byte{bucketSessions, bucketOrder, bucketEnded}, logBuckets...) {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	return nil
}

// indexOwners fills s.owners and s.unreadable from the records.
func (s *Store) indexOwners(tx *bolt.Tx) error {
	return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
		id := string(k)
		if r, err := decodeRecord(id, v); err == nil {
			s.owned(r.Owner, id, r.Order)
		} else {
			s.unreadable[id] = true
		}
		return nil
	})
}

// owned records that owner has session id, whose order key is order,
// unless a later incarnation of id is recorded already.
func (s *Store) owned(owner, id string, order uint64) {
	if owner == "" {
		return // listed with every session
	}
	s.ownersMu.Lock()
	defer s.ownersMu.Unlock()
	ids := s.owners[owner]
	if ids == nil {
		ids = map[string]uint64{}
		s.owners[owner] = ids
	}
	if ids[id] < order {
		ids[id] = order
	}
}

// disowned records that session id of owner ("" when unknown), whose
// order key was order, is gone; a later incarnation of id stays.
func (s *Store) disowned(owner, id string, order uint64) {
	s.recordsMu.Lock()
	delete(s.records, id) // read again, if created again
	s.recordsMu.Unlock()
	s.ownersMu.Lock()
	defer s.ownersMu.Unlock()
	delete(s.unreadable, id)
	if ids := s.owners[owner]; ids != nil && ids[id] == order {
		delete(ids, id)
		if len(ids) == 0 {
			delete(s.owners, owner)
		}
	}
}

// ownedBy returns the ids of the unreadable records and of owner's
// sessions, oldest first.
func (s *Store) ownedBy(owner string) []string {
	s.ownersMu.Lock()
	defer s.ownersMu.Unlock()
	owned := s.owners[owner]
	byOrder := slices.SortedFunc(maps.Keys(owned), func(a, b string) int { return cmp.Compare(owned[a], owned[b]) })
	return append(slices.Collect(maps.Keys(s.unreadable)), byOrder...)
}

// record is a session record as stored.
type record struct {
	ID              string    `json:"id"`
	Owner           string    `json:"owner,omitempty"`
	Agent           string    `json:"agent,omitempty"`
	Cwd             string    `json:"cwd,omitempty"`
	State           string    `json:"state,omitempty"`
	AgentSessionID  string    `json:"agent_session_id,omitempty"`
	ProtocolVersion int       `json:"protocol_version,omitempty"`
	MCPServers      []byte    `json:"mcp_servers,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
	LastSeq         uint64    `json:"last_seq,omitempty"`
	TrimmedSeq      uint64    `json:"trimmed_seq,omitempty"`
	// EventBytes is the length of the kept events' encodings; 0 with
	// events kept is not known (a record written before it was counted).
	EventBytes int64 `json:"event_bytes,omitempty"`
	// CallBytes is the length of the tool calls' encodings; 0 with calls
	// kept is not known, as EventBytes.
	CallBytes      int64     `json:"call_bytes,omitempty"`
	Detail         string    `json:"detail,omitempty"`
	StateChangedAt time.Time `json:"state_changed_at,omitzero"`
	// Order is the session's key in the order bucket.
	Order uint64 `json:"order"`
	// Ended is the closed session's key in the ended bucket, 0 for one
	// not closed (or closed by a gateway that did not keep ended).
	Ended uint64 `json:"ended,omitempty"`
}

func toRecord(s *statestore.Session, order uint64) *record {
	return &record{
		ID: s.ID, Owner: s.Owner, Agent: s.Agent, Cwd: s.Cwd, State: string(s.State),
		AgentSessionID: s.AgentSessionID, ProtocolVersion: s.ProtocolVersion, MCPServers: s.MCPServers, CreatedAt: s.CreatedAt,
		LastSeq: s.LastSeq, TrimmedSeq: s.TrimmedSeq, Detail: s.Detail, StateChangedAt: s.StateChangedAt, Order: order,
	}
}

func (r *record) session() *statestore.Session {
	return &statestore.Session{
		ID: r.ID, Owner: r.Owner, Agent: r.Agent, Cwd: r.Cwd, State: statestore.State(r.State),
		AgentSessionID: r.AgentSessionID, ProtocolVersion: r.ProtocolVersion, MCPServers: r.MCPServers, CreatedAt: r.CreatedAt,
		LastSeq: r.LastSeq, TrimmedSeq: r.TrimmedSeq, Detail: r.Detail, StateChangedAt: r.StateChangedAt,
		Bytes: r.EventBytes + r.CallBytes,
	}
}

// u64 returns v as an 8-byte big-endian key, so keys sort as numbers.
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

// corrupt reports a stored value that cannot be read.
func corrupt(what string, err error) error {
	return fmt.Errorf("corrupt %s: %w", what, err)
}

// passed reports whether err is to reach the caller as it is: a refusal
// of the caller's request rather than a failure of the store.
func passed(err error) bool {
	return errors.Is(err, statestore.ErrNotFound) || errors.Is(err, statestore.ErrExists) ||
		errors.Is(err, statestore.ErrSeqConflict) || errors.Is(err, statestore.ErrTrimmed) ||
		errors.Is(err, errClosed)
}

// wrap gives a failure of op on session id its context.
func wrap(op, id string, err error) error {
	if err == nil || passed(err) {
		return err
	}
	if id == "" {
		return fmt.Errorf("statestore: bolt %s: %w", op, err)
	}
	return fmt.Errorf("statestore: bolt %s session %s: %w", op, id, err)
}

// readRecord reads the record of session id as getRecord does, for a
// read that does not change it: a record whose bytes are those decoded
// last time is not decoded again (its JSON was a tenth of the gateway's
// CPU on bolt with many sessions, read by every Append).
func (s *Store) readRecord(tx *bolt.Tx, id string) (*record, error) {
	data, err := recordData(tx, id)
	if err != nil {
		return nil, err
	}
	s.recordsMu.Lock()
	c, ok := s.records[id]
	s.recordsMu.Unlock()
	if ok && bytes.Equal(c.data, data) {
		r := c.r
		return &r, nil
	}
	r, err := decodeRecord(id, data)
	if err != nil {
		return nil, err
	}
	s.recordsMu.Lock()
	s.records[id] = decodedRecord{data: bytes.Clone(data), r: *r}
	s.recordsMu.Unlock()
	return r, nil
}

// decodedRecord is a record's bytes and what they decode to.
type decodedRecord struct {
	data []byte
	r    record
}

// getRecord reads the record of session id.
func getRecord(tx *bolt.Tx, id string) (*record, error) {
	data, err := recordData(tx, id)
	if err != nil {
		return nil, err
	}
	return decodeRecord(id, data)
}

// recordData returns the stored bytes of session id's record (the file's
// memory, valid in tx).
func recordData(tx *bolt.Tx, id string) ([]byte, error) {
	data := tx.Bucket(bucketSessions).Get([]byte(id))
	if data == nil {
		return nil, fmt.Errorf("%w: %s", statestore.ErrNotFound, id)
	}
	return data, nil
}

func decodeRecord(id string, data []byte) (*record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, corrupt("record", err)
	}
	if r.ID != id {
		return nil, corrupt("record", fmt.Errorf("it holds session %q", r.ID))
	}
	return &r, nil
}

func putRecord(tx *bolt.Tx, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	return tx.Bucket(bucketSessions).Put([]byte(r.ID), data)
}

// logBuckets are the top-level buckets that hold a bucket per session.
var logBuckets = [][]byte{bucketEvents, bucketCalls, bucketCallIdx}

// logOf returns session id's bucket in the top-level bucket name.
func logOf(tx *bolt.Tx, id string, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name).Bucket([]byte(id))
	if b == nil {
		return nil, corrupt("log", fmt.Errorf("its %s bucket is missing", name))
	}
	return b, nil
}

// update runs fn, as op on session id, in a write transaction, batched
// with the writes of other goroutines when there are any. fn may run more
// than once and must find any refusal (see passed) before it writes; a
// refusal is returned to the caller without failing the batch.
func (s *Store) update(op, id string, fn func(tx *bolt.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	var refusal error
	run := func(tx *bolt.Tx) error {
		refusal = nil
		err := fn(tx)
		if passed(err) {
			refusal = err
			return nil
		}
		return err
	}
	var err error
	if s.writers.Add(1) == 1 {
		err = s.db.Update(run)
	} else {
		err = s.db.Batch(run)
	}
	s.writers.Add(-1)
	if err != nil {
		return wrap(op, id, err)
	}
	return refusal
}

// view runs fn, as op on session id, in a read transaction.
func (s *Store) view(op, id string, fn func(tx *bolt.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	return wrap(op, id, s.db.View(fn))
}

// CreateSession implements statestore.Store.
func (s *Store) CreateSession(_ context.Context, sess *statestore.Session) error {
	var n uint64 // the session's order key
	err := s.update("create", sess.ID, func(tx *bolt.Tx) error {
		key := []byte(sess.ID)
		if tx.Bucket(bucketSessions).Get(key) != nil {
			return fmt.Errorf("%w: %s", statestore.ErrExists, sess.ID)
		}
		order := tx.Bucket(bucketOrder)
		var err error
		if n, err = order.NextSequence(); err != nil {
			return err
		}
		if err := putRecord(tx, toRecord(sess, n)); err != nil {
			return err
		}
		if err := order.Put(u64(n), key); err != nil {
			return err
		}
		if err := deleteLogs(tx, key); err != nil {
			return err
		}
		for _, name := range logBuckets {
			if _, err := tx.Bucket(name).CreateBucket(key); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		s.owned(sess.Owner, sess.ID, n)
	}
	return err
}

// GetSession implements statestore.Store.
func (s *Store) GetSession(_ context.Context, id string) (*statestore.Session, error) {
	pend := s.pend.of(id) // taken before the transaction: see "Reads"
	var out *statestore.Session
	err := s.view("get", id, func(tx *bolt.Tx) error {
		r, err := s.readRecord(tx, id)
		if err != nil {
			return err
		}
		out = withLogged(r, unapplied(tx, r, pend))
		return nil
	})
	return out, err
}

// ListSessions implements statestore.Store. All sessions are listed in
// the order bucket's order; an owner's, from s.owners.
func (s *Store) ListSessions(_ context.Context, owner string) ([]*statestore.Session, error) {
	if owner != "" {
		return s.listOwned(owner)
	}
	pend := s.pend.all()
	var out []*statestore.Session
	err := s.view("list sessions", "", func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		return tx.Bucket(bucketOrder).ForEach(func(_, v []byte) error {
			id := string(v)
			data := sessions.Get(v)
			if data == nil {
				return fmt.Errorf("session %s: %w", id, corrupt("session list", errors.New("it lists the session but holds no record")))
			}
			r, err := decodeRecord(id, data)
			if err != nil {
				return fmt.Errorf("session %s: %w", id, err)
			}
			out = append(out, withLogged(r, unapplied(tx, r, pend[id])))
			return nil
		})
	})
	return out, err
}

// listOwned lists owner's sessions, oldest first.
func (s *Store) listOwned(owner string) ([]*statestore.Session, error) {
	ids := s.ownedBy(owner)
	pend := s.pend.all()
	var out []*statestore.Session
	err := s.view("list sessions", "", func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		for _, id := range ids {
			data := sessions.Get([]byte(id))
			if data == nil {
				continue // deleted since ownedBy
			}
			r, err := decodeRecord(id, data)
			if err != nil {
				return fmt.Errorf("session %s: %w", id, err)
			}
			if r.Owner == owner { // not replaced by another owner's since
				out = append(out, withLogged(r, unapplied(tx, r, pend[id])))
			}
		}
		return nil
	})
	return out, err
}

// modify changes the record of session id with change.
func (s *Store) modify(op, id string, change func(r *record)) error {
	return s.update(op, id, func(tx *bolt.Tx) error {
		r, err := getRecord(tx, id)
		if err != nil {
			return err
		}
		change(r)
		return putRecord(tx, r)
	})
}

// SetState implements statestore.Store. A session that closes is entered
// in ended, and the sessions that closed first are deleted past
// MaxEndedSessions, in the same transaction.
func (s *Store) SetState(_ context.Context, id string, state statestore.State, detail string) error {
	var gone []deleted
	err := s.update("set state of", id, func(tx *bolt.Tx) error {
		gone = nil
		r, err := getRecord(tx, id)
		if err != nil {
			return err
		}
		r.State, r.Detail, r.StateChangedAt = string(state), detail, time.Now().UTC()
		if err := leaveEnded(tx, r); err != nil {
			return err
		}
		if state != statestore.StateClosed {
			return putRecord(tx, r)
		}
		if err := enterEnded(tx, r); err != nil {
			return err
		}
		if err := putRecord(tx, r); err != nil {
			return err
		}
		gone, err = s.trimEnded(tx)
		return err
	})
	if err == nil {
		s.forgetDeleted(gone)
	}
	return err
}

// endedCount returns the number of entries in the ended bucket.
func endedCount(tx *bolt.Tx) uint64 {
	if v := tx.Bucket(bucketMeta).Get(keyEnded); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func setEndedCount(tx *bolt.Tx, n uint64) error {
	return tx.Bucket(bucketMeta).Put(keyEnded, u64(n))
}

// enterEnded enters closed session r in ended, as the last closed; the
// caller puts r.
func enterEnded(tx *bolt.Tx, r *record) error {
	ended := tx.Bucket(bucketEnded)
	n, err := ended.NextSequence()
	if err != nil {
		return err
	}
	if err := ended.Put(u64(n), []byte(r.ID)); err != nil {
		return err
	}
	r.Ended = n
	return setEndedCount(tx, endedCount(tx)+1)
}

// leaveEnded removes r's entry in ended, if it has one; the caller puts r.
func leaveEnded(tx *bolt.Tx, r *record) error {
	if r.Ended == 0 {
		return nil
	}
	ended := tx.Bucket(bucketEnded)
	if v := ended.Get(u64(r.Ended)); string(v) == r.ID {
		if err := ended.Delete(u64(r.Ended)); err != nil {
			return err
		}
		if err := setEndedCount(tx, endedCount(tx)-1); err != nil {
			return err
		}
	}
	r.Ended = 0
	return nil
}

// deleted is a session a transaction deleted, for forgetDeleted once it
// committed.
type deleted struct {
	id, owner string
	order     uint64
}

// forgetDeleted updates s.owners and wakes the waiters of the sessions a
// committed transaction deleted.
func (s *Store) forgetDeleted(gone []deleted) {
	for _, d := range gone {
		s.disowned(d.owner, d.id, d.order)
		s.pend.dropSession(d.id, d.order)
		s.wake(d.id)
	}
}

// trimEnded deletes the sessions that closed first while ended holds
// more than MaxEndedSessions. An entry whose session is gone, or not the
// closed session it named, is dropped on the way.
func (s *Store) trimEnded(tx *bolt.Tx) ([]deleted, error) {
	limit := s.opts.MaxEndedSessions
	if limit <= 0 {
		return nil, nil
	}
	var gone []deleted
	ended := tx.Bucket(bucketEnded)
	for n := endedCount(tx); n > uint64(limit); n-- {
		k, v := ended.Cursor().First()
		if k == nil {
			return gone, setEndedCount(tx, 0)
		}
		id := string(v)
		if err := ended.Delete(k); err != nil {
			return nil, err
		}
		if err := setEndedCount(tx, n-1); err != nil {
			return nil, err
		}
		r, err := getRecord(tx, id)
		if err != nil || r.Ended != binary.BigEndian.Uint64(k) {
			continue // gone, unreadable, or closed again since
		}
		if err := deleteSession(tx, r); err != nil {
			return nil, err
		}
		gone = append(gone, deleted{id, r.Owner, r.Order})
	}
	return gone, nil
}

// indexEnded makes ended agree with the records, for Open: the closed
// sessions not in it (closed by a gateway that did not keep it) are
// entered, by when they closed (StateChangedAt, or CreatedAt for a record
// without it), after those in it; entries that name no closed session
// with their key are dropped; then it is trimmed to MaxEndedSessions.
func (s *Store) indexEnded(tx *bolt.Tx) ([]deleted, error) {
	sessions, ended := tx.Bucket(bucketSessions), tx.Bucket(bucketEnded)
	var missing []*record
	if err := sessions.ForEach(func(k, v []byte) error {
		r, err := decodeRecord(string(k), v)
		if err != nil || r.State != string(statestore.StateClosed) {
			return nil //nolint:nilerr // a record that does not decode, or is not closed, has no place in the index; the walk goes on
		}
		if r.Ended == 0 || string(ended.Get(u64(r.Ended))) != r.ID {
			missing = append(missing, r)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var n uint64
	c := ended.Cursor()
	for k, v := c.First(); k != nil; {
		r, err := getRecord(tx, string(v))
		if err != nil || r.State != string(statestore.StateClosed) || r.Ended != binary.BigEndian.Uint64(k) {
			at := bytes.Clone(k)
			if err := c.Delete(); err != nil {
				return nil, err
			}
			k, v = c.Seek(at) // the entry after the deleted one
			continue
		}
		n++
		k, v = c.Next()
	}
	if err := setEndedCount(tx, n); err != nil {
		return nil, err
	}
	closedAt := func(r *record) time.Time {
		if r.StateChangedAt.IsZero() {
			return r.CreatedAt
		}
		return r.StateChangedAt
	}
	slices.SortStableFunc(missing, func(a, b *record) int { return closedAt(a).Compare(closedAt(b)) })
	for _, r := range missing {
		if err := enterEnded(tx, r); err != nil {
			return nil, err
		}
		if err := putRecord(tx, r); err != nil {
			return nil, err
		}
	}
	return s.trimEnded(tx)
}

// SetAgentSession implements statestore.Store.
func (s *Store) SetAgentSession(_ context.Context, id, agentSessionID string, protocolVersion int) error {
	return s.modify("set agent session of", id, func(r *record) {
		r.AgentSessionID, r.ProtocolVersion = agentSessionID, protocolVersion
	})
}

// keyed is a protobuf message's encoding and the key it is stored at.
type keyed struct {
	key  []byte
	data []byte
}

// Append implements statestore.Store. It checks the events against the
// session as the file and the log hold it, logs them (see "Appends") and
// returns once the log is synced. An Append that would drop events past
// the retention caps, or to a session counted by an older gateway, is
// written to the file at once instead, after the log's entries.
func (s *Store) Append(_ context.Context, id string, events []*encoded.Event, changed []statestore.Call) error {
	s.live.RLock()
	defer s.live.RUnlock()
	if s.closed.Load() {
		return errClosed
	}
	unlock := s.lockSession(id)
	defer unlock()
	pend := s.pend.of(id)
	var (
		e            *entry
		slow, behind bool // behind: the log holds some of the session's Appends
	)
	err := s.view("append to", id, func(tx *bolt.Tx) error {
		r, err := s.readRecord(tx, id)
		if err != nil {
			return err
		}
		// A session whose logs are missing is refused now, as the file's
		// write would refuse it, not found by a checkpoint after the
		// Append was acknowledged.
		if !logsHeld(tx, id) {
			return corrupt("log", errors.New("its buckets are missing"))
		}
		logged := unapplied(tx, r, pend)
		behind = len(logged) > 0
		sess := withLogged(r, logged)
		if err := statestore.CheckSeqs(sess.LastSeq, events); err != nil {
			return fmt.Errorf("%w (session %s)", err, id)
		}
		e = &entry{id: id, order: r.Order, events: events, calls: changed}
		for _, ev := range events {
			e.eventBytes += int64(ev.Size())
		}
		eventBytes := r.EventBytes
		for _, l := range logged {
			eventBytes += l.eventBytes
		}
		uncounted, err := uncountedCalls(tx, r, changed)
		if err != nil {
			return err
		}
		kept := sess.LastSeq + uint64(len(events)) - r.TrimmedSeq
		slow = (r.EventBytes == 0 && r.LastSeq > r.TrimmedSeq) || uncounted ||
			s.opts.Over(kept, eventBytes+e.eventBytes)
		if slow {
			return nil
		}
		e.callDelta, err = callDelta(tx, r, logged, changed)
		e.size = e.eventBytes
		for _, c := range changed {
			e.size += int64(len(c.Proto))
		}
		// A frame the log could not read back goes to the file instead.
		slow = e.frameBound() > maxFrame
		return err
	})
	if err != nil {
		return err
	}
	if slow {
		// The file's write must follow the session's logged Appends: when
		// the log holds some, they are applied first. A session at its
		// retention caps appends this way every time, with nothing logged
		// after the first, so its writes share the file's commits with
		// other writers' (DB.Batch) and do not each cost a checkpoint.
		if behind {
			if err := s.checkpoint(); err != nil {
				return wrap("append to", id, err)
			}
		}
		return s.appendNow(id, events, changed)
	}
	if len(events) == 0 && len(changed) == 0 {
		return nil
	}
	if err := s.log.append(e); err != nil {
		return wrap("append to", id, err)
	}
	if len(events) > 0 {
		s.wake(id)
	}
	return nil
}

// uncountedCalls reports whether session r has tool calls whose bytes its
// record does not count (written by a gateway that did not count them)
// and changed calls to count: the file's write counts them first.
func uncountedCalls(tx *bolt.Tx, r *record, changed []statestore.Call) (bool, error) {
	if r.CallBytes != 0 || len(changed) == 0 {
		return false, nil
	}
	list, err := logOf(tx, r.ID, bucketCalls)
	if err != nil {
		return false, err
	}
	k, _ := list.Cursor().First()
	return k != nil, nil
}

// callDelta returns what storing changed changes session r's call bytes
// by, the calls as the file and the logged entries hold them.
func callDelta(tx *bolt.Tx, r *record, logged []*entry, changed []statestore.Call) (int64, error) {
	size := map[string]int64{}
	var delta int64
	for _, c := range changed {
		old, ok := size[c.ID]
		if !ok {
			var err error
			if old, err = callSize(tx, r, logged, c.ID); err != nil {
				return 0, err
			}
		}
		size[c.ID] = int64(len(c.Proto))
		delta += int64(len(c.Proto)) - old
	}
	return delta, nil
}

// callSize returns the length of call id's encoding, 0 when the session
// has no such call.
func callSize(tx *bolt.Tx, r *record, logged []*entry, id string) (int64, error) {
	if c, ok := loggedCall(logged, id); ok {
		return int64(len(c)), nil
	}
	v, err := fileCall(tx, r.ID, id)
	return int64(len(v)), err
}

// loggedCall returns the encoding of call id in the last of the entries
// that changed it.
func loggedCall(logged []*entry, id string) ([]byte, bool) {
	for i := len(logged) - 1; i >= 0; i-- {
		for j := len(logged[i].calls) - 1; j >= 0; j-- {
			if c := logged[i].calls[j]; c.ID == id {
				return c.Proto, true
			}
		}
	}
	return nil, false
}

// fileCall returns the encoding of session sid's call id as the file holds
// it, nil for none.
func fileCall(tx *bolt.Tx, sid, id string) ([]byte, error) {
	idx, err := logOf(tx, sid, bucketCallIdx)
	if err != nil {
		return nil, err
	}
	at := idx.Get([]byte(id))
	if at == nil {
		return nil, nil
	}
	list, err := logOf(tx, sid, bucketCalls)
	if err != nil {
		return nil, err
	}
	v := list.Get(at)
	if v == nil {
		return nil, corrupt(fmt.Sprintf("tool call %q", id), errors.New("its index names no call"))
	}
	return v, nil
}

// appendNow writes an Append to the file in a transaction of its own.
func (s *Store) appendNow(id string, events []*encoded.Event, changed []statestore.Call) error {
	evs := make([]keyed, len(events))
	for i, e := range events {
		evs[i] = keyed{u64(e.Seq()), e.Proto()}
	}
	calls := make([]keyed, len(changed))
	for i, c := range changed {
		calls[i] = keyed{[]byte(c.ID), c.Proto}
	}
	err := s.update("append to", id, func(tx *bolt.Tx) error {
		r, err := getRecord(tx, id)
		if err != nil {
			return err
		}
		if err := statestore.CheckSeqs(r.LastSeq, events); err != nil {
			return fmt.Errorf("%w (session %s)", err, id)
		}
		if err := putCalls(tx, r, calls); err != nil {
			return err
		}
		if len(evs) > 0 {
			if err := s.putEvents(tx, r, evs); err != nil {
				return err
			}
		}
		if len(evs) == 0 && len(calls) == 0 {
			return nil
		}
		return putRecord(tx, r)
	})
	if err == nil && len(events) > 0 {
		s.wake(id)
	}
	return err
}

// putEvents stores evs, advances r.LastSeq and drops the events beyond the
// retention caps, the oldest first (the newest is always kept).
func (s *Store) putEvents(tx *bolt.Tx, r *record, evs []keyed) error {
	b, err := logOf(tx, r.ID, bucketEvents)
	if err != nil {
		return err
	}
	// Seqs only grow: the events go at the end, whose pages then split
	// full rather than half full (bbolt's default, for keys put anywhere),
	// so a checkpoint writes half the pages.
	b.FillPercent = 1
	if r.EventBytes == 0 && r.LastSeq > r.TrimmedSeq {
		// Counted once for a record written before the count was kept.
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r.EventBytes += int64(len(v))
		}
	}
	for _, e := range evs {
		if err := b.Put(e.key, e.data); err != nil {
			return err
		}
		r.EventBytes += int64(len(e.data))
	}
	r.LastSeq = binary.BigEndian.Uint64(evs[len(evs)-1].key)
	for s.opts.Over(r.LastSeq-r.TrimmedSeq, r.EventBytes) {
		seq := u64(r.TrimmedSeq + 1)
		r.EventBytes -= int64(len(b.Get(seq)))
		if err := b.Delete(seq); err != nil {
			return err
		}
		r.TrimmedSeq++
	}
	return nil
}

// putCalls stores changed tool calls over their earlier snapshots, gives
// the new ones the next first-seen index, and counts their bytes in r.
func putCalls(tx *bolt.Tx, r *record, calls []keyed) error {
	if len(calls) == 0 {
		return nil
	}
	list, err := logOf(tx, r.ID, bucketCalls)
	if err != nil {
		return err
	}
	idx, err := logOf(tx, r.ID, bucketCallIdx)
	if err != nil {
		return err
	}
	if r.CallBytes == 0 {
		// Counted once for a record written before the count was kept.
		c := list.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r.CallBytes += int64(len(v))
		}
	}
	for _, c := range calls {
		at := idx.Get(c.key)
		if at != nil {
			r.CallBytes -= int64(len(list.Get(at)))
		}
		r.CallBytes += int64(len(c.data))
		if at == nil {
			n, err := list.NextSequence()
			if err != nil {
				return err
			}
			at = u64(n)
			if err := idx.Put(c.key, at); err != nil {
				return err
			}
		}
		if err := list.Put(at, c.data); err != nil {
			return err
		}
	}
	return nil
}

// Events implements statestore.Store.
func (s *Store) Events(_ context.Context, id string, after uint64, limit int) ([]*encoded.Event, error) {
	pend := s.pend.of(id)
	var out []*encoded.Event
	err := s.view("read events of", id, func(tx *bolt.Tx) error {
		r, err := s.readRecord(tx, id)
		if err != nil {
			return err
		}
		if after < r.TrimmedSeq {
			return statestore.TrimmedError(id, r.TrimmedSeq, after)
		}
		b, err := logOf(tx, id, bucketEvents)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			// v is the file's memory, valid only in the transaction.
			e, err := encoded.Decode(bytes.Clone(v))
			if err != nil {
				return corrupt(fmt.Sprint("event ", binary.BigEndian.Uint64(k)), err)
			}
			out = append(out, e)
		}
		// Then the logged ones, all after what the file holds, made from
		// their bytes as those read from the file are.
		for _, l := range unapplied(tx, r, pend) {
			for _, e := range l.events {
				if e.Seq() <= after || (limit > 0 && len(out) >= limit) {
					continue
				}
				read, err := encoded.Decode(e.Proto())
				if err != nil {
					return corrupt(fmt.Sprint("event ", e.Seq()), err)
				}
				out = append(out, read)
			}
		}
		return nil
	})
	return out, err
}

// WaitEvents implements statestore.Store. It is woken by the Appends made
// through s.
func (s *Store) WaitEvents(ctx context.Context, id string, after uint64) error {
	for {
		// Take the channel before reading the record, so an Append that
		// commits after the read closes it.
		s.mu.Lock()
		ch := s.waits[id]
		if ch == nil {
			ch = make(chan struct{})
			s.waits[id] = ch
		}
		s.mu.Unlock()
		rec, err := s.GetSession(ctx, id)
		if err != nil {
			return err
		}
		if rec.LastSeq > after {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake wakes the waiters on session id.
func (s *Store) wake(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.waits[id]; ch != nil {
		close(ch)
		delete(s.waits, id)
	}
}

// ToolCalls implements statestore.Store.
func (s *Store) ToolCalls(_ context.Context, id string) ([]*acpv2.ToolCall, uint64, error) {
	var (
		out  []*acpv2.ToolCall
		asOf uint64
	)
	pend := s.pend.of(id)
	err := s.view("read tool calls of", id, func(tx *bolt.Tx) error {
		r, err := s.readRecord(tx, id)
		if err != nil {
			return err
		}
		logged := unapplied(tx, r, pend)
		asOf = withLogged(r, logged).LastSeq
		// The logged calls replace the file's of their ids; the new ones
		// follow in the order they were first logged.
		latest := map[string][]byte{}
		var added []string
		for _, l := range logged {
			for _, c := range l.calls {
				if _, ok := latest[c.ID]; !ok {
					added = append(added, c.ID)
				}
				latest[c.ID] = c.Proto
			}
		}
		b, err := logOf(tx, id, bucketCalls)
		if err != nil {
			return err
		}
		idx, err := logOf(tx, id, bucketCallIdx)
		if err != nil {
			return err
		}
		replaced := map[string][]byte{} // by first-seen key
		inFile := map[string]bool{}
		for callID, v := range latest {
			if at := idx.Get([]byte(callID)); at != nil {
				replaced[string(at)], inFile[callID] = v, true
			}
		}
		decode := func(what string, v []byte) error {
			tc := &acpv2.ToolCall{}
			if err := proto.Unmarshal(v, tc); err != nil {
				return corrupt(what, err)
			}
			out = append(out, tc)
			return nil
		}
		if err := b.ForEach(func(k, v []byte) error {
			if l, ok := replaced[string(k)]; ok {
				v = l
			}
			return decode(fmt.Sprint("tool call ", binary.BigEndian.Uint64(k)), v)
		}); err != nil {
			return err
		}
		for _, callID := range added {
			if !inFile[callID] {
				if err := decode(fmt.Sprintf("tool call %q", callID), latest[callID]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, asOf, nil
}

// ToolCall implements statestore.Store: one lookup in callidx, one in
// calls.
func (s *Store) ToolCall(_ context.Context, id, callID string) (*acpv2.ToolCall, uint64, error) {
	var (
		out  *acpv2.ToolCall
		asOf uint64
	)
	pend := s.pend.of(id)
	err := s.view("read a tool call of", id, func(tx *bolt.Tx) error {
		r, err := s.readRecord(tx, id)
		if err != nil {
			return err
		}
		logged := unapplied(tx, r, pend)
		asOf = withLogged(r, logged).LastSeq
		v, ok := loggedCall(logged, callID)
		if !ok {
			if v, err = fileCall(tx, id, callID); err != nil || v == nil {
				return err
			}
		}
		tc := &acpv2.ToolCall{}
		if err := proto.Unmarshal(v, tc); err != nil {
			return corrupt(fmt.Sprintf("tool call %q", callID), err)
		}
		out = tc
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, asOf, nil
}

// DeleteSession implements statestore.Store.
func (s *Store) DeleteSession(_ context.Context, id string) error {
	var owner string // "" for a corrupt record
	var order uint64
	err := s.update("delete", id, func(tx *bolt.Tx) error {
		r, err := getRecord(tx, id)
		if errors.Is(err, statestore.ErrNotFound) {
			return err
		}
		owner, order = "", 0
		if err == nil {
			owner, order = r.Owner, r.Order
			return deleteSession(tx, r)
		}
		// A corrupt record can be deleted too; as its order key is
		// unknown, its order entry is looked up by id (its ended entry,
		// if any, is dropped when met).
		key := []byte(id)
		if err := deleteOrderOf(tx, key); err != nil {
			return err
		}
		if err := tx.Bucket(bucketSessions).Delete(key); err != nil {
			return err
		}
		return deleteLogs(tx, key)
	})
	if err == nil {
		s.disowned(owner, id, order)
		s.pend.dropSession(id, order)
		s.wake(id)
	}
	return err
}

// deleteSession removes session r: its record, its entries in order and
// ended, and its logs.
func deleteSession(tx *bolt.Tx, r *record) error {
	if err := leaveEnded(tx, r); err != nil {
		return err
	}
	if err := tx.Bucket(bucketOrder).Delete(u64(r.Order)); err != nil {
		return err
	}
	key := []byte(r.ID)
	if err := tx.Bucket(bucketSessions).Delete(key); err != nil {
		return err
	}
	return deleteLogs(tx, key)
}

// deleteLogs removes the events and tool calls of session id.
func deleteLogs(tx *bolt.Tx, id []byte) error {
	for _, name := range logBuckets {
		if err := tx.Bucket(name).DeleteBucket(id); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
	}
	return nil
}

// deleteOrderOf removes the order entries that name session id.
func deleteOrderOf(tx *bolt.Tx, id []byte) error {
	c := tx.Bucket(bucketOrder).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if string(v) == string(id) {
			return c.Delete()
		}
	}
	return nil
}

// Close implements statestore.Store. It ends the waits in progress; calls
// made after it fail.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return errClosed
	}
	s.mu.Lock()
	for id, ch := range s.waits {
		close(ch)
		delete(s.waits, id)
	}
	s.mu.Unlock()
	s.live.Lock() // the Appends under way are done; none start after
	defer s.live.Unlock()
	close(s.stopCheckpoints)
	<-s.checkpointsDone
	// What the log holds goes to the file now; when it cannot, the log's
	// segments stay for the next Open to apply.
	errs := []error{s.checkpoint(), s.log.stop()}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("statestore: close bolt file %s: %w", s.path, err))
	}
	return errors.Join(errs...)
}
