package boltstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// The write-ahead log: segment files next to the bbolt file, PATH.wal.N,
// N counting up from 1. Each holds frames, one per Append:
//
//	u32 payload length | u32 CRC-32C of the payload | payload
//
// and a payload is
//
//	uvarint gen | uvarint order | uvarint len, session id |
//	uvarint events | per event: uvarint len, its protobuf encoding |
//	uvarint calls | per call: uvarint len, id | uvarint 0, uvarint len,
//	its encoding; or uvarint i: the encoding is the tool call of event i
//	(from 1) of the frame, a merged tool call's event
//
// all integers unsigned varints. gen numbers the Appends of the file in
// the order they were logged; the bbolt file's meta bucket keeps the gen
// of the last Append applied to it ("applied"), so that an entry still in
// a segment after a crash is applied once.

const (
	walInfix     = ".wal."
	frameHeader  = 8
	maxFrame     = 1 << 30
	maxGroupSize = 8 << 20 // bytes of frames written and synced at once, at most
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is one Append as the log holds it.
type entry struct {
	gen    uint64
	id     string
	order  uint64 // the session's order key: which incarnation of id it is
	events []*encoded.Event
	calls  []statestore.Call
	// size is the length of the events' and the calls' encodings;
	// eventBytes and callDelta what the entry adds to the session's
	// counts (a call replaced counts the difference).
	size       int64
	eventBytes int64
	callDelta  int64
}

// lastSeq is the seq of e's last event, 0 when it has none.
func (e *entry) lastSeq() uint64 {
	if len(e.events) == 0 {
		return 0
	}
	return e.events[len(e.events)-1].Seq()
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// frameBound is at least the length of e's frame.
func (e *entry) frameBound() int {
	n := frameHeader + 4*binary.MaxVarintLen64 + len(e.id)
	for _, ev := range e.events {
		n += binary.MaxVarintLen64 + ev.Size()
	}
	for _, c := range e.calls {
		n += 3*binary.MaxVarintLen64 + len(c.ID) + len(c.Proto)
	}
	return n
}

// appendFrame appends e's frame to b. A call whose encoding is that of a
// merged tool call's event in e (as the session hands them, sharing the
// bytes) is written as the event's number rather than a second time.
func (e *entry) appendFrame(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = binary.AppendUvarint(b, e.gen)
	b = binary.AppendUvarint(b, e.order)
	b = appendBytes(b, []byte(e.id))
	b = binary.AppendUvarint(b, uint64(len(e.events)))
	var merged []mergedCall // the events that are merged tool calls
	for i, ev := range e.events {
		b = appendBytes(b, ev.Proto())
		if ev.Kind() == encoded.ToolCall {
			merged = append(merged, mergedCall{i, ev.Field(encoded.ToolCall)})
		}
	}
	b = binary.AppendUvarint(b, uint64(len(e.calls)))
	for _, c := range e.calls {
		b = appendBytes(b, []byte(c.ID))
		if i, ok := eventOfCall(merged, c.Proto); ok {
			b = binary.AppendUvarint(b, uint64(i)+1)
			continue
		}
		b = binary.AppendUvarint(b, 0)
		b = appendBytes(b, c.Proto)
	}
	payload := b[start+frameHeader:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

// mergedCall is a merged tool call's event in an entry: its index and its
// call's encoding.
type mergedCall struct {
	event int
	call  []byte
}

// eventOfCall returns the index of the last of the merged events whose
// tool call is call. (bytes.Equal of the same bytes does not read them.)
func eventOfCall(merged []mergedCall, call []byte) (int, bool) {
	for k := len(merged) - 1; k >= 0; k-- {
		if m := merged[k]; len(m.call) == len(call) && bytes.Equal(m.call, call) {
			return m.event, true
		}
	}
	return 0, false
}

// errShortFrame is a frame cut off by the end of its segment.
var errShortFrame = errors.New("frame cut off")

// readFrame reads the frame at the start of b, returning its entry and
// its length.
func readFrame(b []byte) (*entry, int, error) {
	if len(b) < frameHeader {
		return nil, 0, errShortFrame
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxFrame || uint64(len(b)-frameHeader) < uint64(n) {
		return nil, 0, errShortFrame
	}
	payload := b[frameHeader : frameHeader+int(n)]
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return nil, 0, errors.New("checksum mismatch")
	}
	e, err := decodePayload(payload)
	if err != nil {
		return nil, 0, err
	}
	return e, frameHeader + int(n), nil
}

// payloadReader reads a payload's fields, remembering the first error.
type payloadReader struct {
	b   []byte
	err error
}

func (r *payloadReader) uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *payloadReader) bytes() []byte {
	n := r.uint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errors.New("length past the frame's end")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// count reads a number of items, each at least one byte long.
func (r *payloadReader) count() int {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.err = errors.New("count past the frame's end")
		return 0
	}
	return int(n)
}

func decodePayload(b []byte) (*entry, error) {
	r := &payloadReader{b: b}
	e := &entry{gen: r.uint(), order: r.uint(), id: string(r.bytes())}
	for range r.count() {
		v := r.bytes()
		if r.err != nil {
			break
		}
		ev, err := encoded.Decode(v)
		if err != nil {
			return nil, fmt.Errorf("event: %w", err)
		}
		e.events = append(e.events, ev)
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		c := statestore.Call{ID: string(r.bytes())}
		switch i := r.uint(); {
		case i == 0:
			c.Proto = r.bytes()
		case i <= uint64(len(e.events)) && e.events[i-1].Kind() == encoded.ToolCall:
			c.Proto = e.events[i-1].Field(encoded.ToolCall)
		default:
			r.err = fmt.Errorf("call %q names event %d, not a merged tool call", c.ID, i)
		}
		e.calls = append(e.calls, c)
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = errors.New("bytes after the payload")
	}
	return e, r.err
}

// segmentPath is the path of segment n of the log of the bbolt file path.
func segmentPath(path string, n uint64) string {
	return path + walInfix + strconv.FormatUint(n, 10)
}

// segments lists the numbers of the log's segments, in order.
func segments(path string) ([]uint64, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	list, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, d := range list {
		rest, ok := strings.CutPrefix(d.Name(), base+walInfix)
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(rest, 10, 64); err == nil && n > 0 && strconv.FormatUint(n, 10) == rest {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// readSegments reads the entries of the log's segments, in order. A frame
// that does not read in the last segment is the end of a write that a crash
// cut short (nothing after it was ever acknowledged): the segment is cut
// there. One in an earlier segment is corruption, and an error.
func readSegments(path string, segs []uint64) ([]*entry, error) {
	var out []*entry
	for i, n := range segs {
		p := segmentPath(path, n)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for off := 0; off < len(data); {
			e, size, err := readFrame(data[off:])
			if err != nil {
				if i < len(segs)-1 {
					return nil, fmt.Errorf("write-ahead log %s: %w at offset %d", p, err, off)
				}
				if err := os.Truncate(p, int64(off)); err != nil {
					return nil, fmt.Errorf("write-ahead log %s: cutting a torn write at offset %d: %w", p, off, err)
				}
				break
			}
			out = append(out, e)
			off += size
		}
	}
	return out, nil
}

// syncDir makes the directory entries of the files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// walFile is what the log needs of its segment file (a test gives one
// that fails).
type walFile interface {
	WriteAt(b []byte, off int64) (int, error)
	Sync() error
	Truncate(size int64) error
	Close() error
}

// wal writes entries to the log: a goroutine takes the Appends waiting,
// writes their frames to the current segment at once, syncs it and then
// hands them to publish, so that many sessions appending at once share
// one write and one sync. (bbolt's commit would rewrite a few pages of
// every session in it; the log writes what the sessions append.)
type wal struct {
	path string
	// publish is called with each group that is durable, in order, before
	// the Appends of the group return and before the next group is
	// written; a rotation that follows finds them published.
	publish func([]*entry)
	open    func(path string) (walFile, error)

	reqs    chan *walReq
	rotates chan chan rotation
	quit    chan struct{}
	done    chan struct{}

	// Owned by the goroutine.
	f      walFile
	seg    uint64
	off    int64
	gen    uint64
	buf    []byte
	broken error
}

type walReq struct {
	e   *entry
	err chan error
}

// rotation is what a rotation tells: every entry up to gen is in a
// segment before seg, which is the one now written.
type rotation struct {
	gen uint64
	seg uint64
	err error
}

func openSegment(path string) (walFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		os.Remove(path) // so that the next try does not find it taken
		return nil, err
	}
	return f, nil
}

// startWAL starts the log's writer on a new segment seg, the entries'
// numbers going on after gen.
func startWAL(path string, seg, gen uint64, open func(string) (walFile, error), publish func([]*entry)) (*wal, error) {
	if open == nil {
		open = openSegment
	}
	f, err := open(segmentPath(path, seg))
	if err != nil {
		return nil, fmt.Errorf("create write-ahead log segment: %w", err)
	}
	w := &wal{
		path: path, publish: publish, open: open, f: f, seg: seg, gen: gen,
		reqs: make(chan *walReq, 256), rotates: make(chan chan rotation), quit: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w, nil
}

// errWALClosed is what an append gets from a log that was stopped.
var errWALClosed = errors.New("the write-ahead log is closed")

// append logs e and returns once it is durable and published, or failed.
func (w *wal) append(e *entry) error {
	r := &walReq{e: e, err: make(chan error, 1)}
	select {
	case w.reqs <- r:
	case <-w.done:
		return errWALClosed
	}
	select {
	case err := <-r.err:
		return err
	case <-w.done:
		select {
		case err := <-r.err:
			return err
		default:
			return errWALClosed
		}
	}
}

// rotate starts a new segment, when the current one holds anything.
func (w *wal) rotate() rotation {
	ch := make(chan rotation, 1)
	select {
	case w.rotates <- ch:
		return <-ch
	case <-w.done:
		return rotation{err: errWALClosed}
	}
}

// stop ends the writer; appends waiting fail. It closes the segment.
func (w *wal) stop() error {
	close(w.quit)
	<-w.done
	return w.f.Close()
}

func (w *wal) run() {
	defer close(w.done)
	var group []*walReq
	for {
		select {
		case r := <-w.reqs:
			group = append(group[:0], r)
			size := int64(0)
		more:
			for size < maxGroupSize {
				select {
				case r := <-w.reqs:
					group = append(group, r)
					size += r.e.size
				default:
					break more
				}
			}
			w.write(group)
			clear(group)
		case ch := <-w.rotates:
			ch <- w.nextSegment()
		case <-w.quit:
			for {
				select {
				case r := <-w.reqs:
					r.err <- errWALClosed
				default:
					return
				}
			}
		}
	}
}

// write logs a group: one write, one sync.
func (w *wal) write(group []*walReq) {
	fail := func(err error) {
		for _, r := range group {
			r.err <- err
		}
	}
	if w.broken != nil {
		fail(w.broken)
		return
	}
	gen := w.gen
	bound := 0
	for _, r := range group {
		bound += r.e.frameBound()
	}
	buf := slices.Grow(w.buf[:0], bound)
	for _, r := range group {
		gen++
		r.e.gen = gen
		buf = r.e.appendFrame(buf)
	}
	if cap(buf) <= 2*maxGroupSize {
		w.buf = buf
	}
	// The group's gens are spent whatever happens: were a refused frame
	// to survive somewhere, no acknowledged one shares its gen.
	w.gen = gen
	if _, err := w.f.WriteAt(buf, w.off); err != nil {
		// Nothing of the group was acknowledged: cut what was written,
		// durably, so that a later open does not find it.
		if terr := w.cutBack(); terr != nil {
			w.broken = fmt.Errorf("the write-ahead log %s failed and could not be cut back (%w); restart the gateway", segmentPath(w.path, w.seg), terr)
		}
		fail(fmt.Errorf("write-ahead log: %w", err))
		return
	}
	if err := w.f.Sync(); err != nil {
		// After a failed sync, what the file holds is unknown: the group
		// is cut (if the file still takes that) and nothing more is taken.
		_ = w.cutBack()
		w.broken = fmt.Errorf("the write-ahead log %s failed to sync (%w); restart the gateway", segmentPath(w.path, w.seg), err)
		fail(w.broken)
		return
	}
	w.off += int64(len(buf))
	entries := make([]*entry, len(group))
	for i, r := range group {
		entries[i] = r.e
	}
	w.publish(entries)
	for _, r := range group {
		r.err <- nil
	}
}

// cutBack cuts the segment back to what was acknowledged, durably.
func (w *wal) cutBack() error {
	if err := w.f.Truncate(w.off); err != nil {
		return err
	}
	return w.f.Sync()
}

// nextSegment starts segment seg+1 when the current one holds anything.
func (w *wal) nextSegment() rotation {
	if w.broken != nil {
		return rotation{err: w.broken}
	}
	if w.off == 0 {
		return rotation{gen: w.gen, seg: w.seg}
	}
	f, err := w.open(segmentPath(w.path, w.seg+1))
	if err != nil {
		return rotation{err: fmt.Errorf("create write-ahead log segment: %w", err)}
	}
	// What the old segment holds was synced: a failure to close it loses
	// nothing, and the log goes on in the new one.
	_ = w.f.Close()
	w.f, w.seg, w.off = f, w.seg+1, 0
	return rotation{gen: w.gen, seg: w.seg}
}

// removeSegments removes the log's segments before seg.
func removeSegments(path string, seg uint64) error {
	segs, err := segments(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range segs {
		if n < seg {
			if err := os.Remove(segmentPath(path, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// pending holds the entries logged but not yet applied to the bbolt file,
// by session, each session's in log order.
type pending struct {
	mu    sync.Mutex
	by    map[string][]*entry
	bytes int64
}

func (p *pending) add(entries []*entry) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range entries {
		p.by[e.id] = append(p.by[e.id], e)
		p.bytes += e.size
	}
	return p.bytes
}

// of returns session id's entries (the slice is not modified afterwards:
// add and drop make new ones).
func (p *pending) of(id string) []*entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[id][:len(p.by[id]):len(p.by[id])]
}

// all returns every session's entries.
func (p *pending) all() map[string][]*entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]*entry, len(p.by))
	for id, l := range p.by {
		out[id] = l[:len(l):len(l)]
	}
	return out
}

// upTo returns the entries up to gen, in log order.
func (p *pending) upTo(gen uint64) []*entry {
	p.mu.Lock()
	var out []*entry
	for _, l := range p.by {
		for _, e := range l {
			if e.gen <= gen {
				out = append(out, e)
			}
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *entry) int { return cmp.Compare(a.gen, b.gen) })
	return out
}

// dropApplied forgets the entries up to gen, now in the bbolt file.
func (p *pending) dropApplied(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.by {
		p.keep(id, func(e *entry) bool { return e.gen > gen })
	}
}

// dropSession forgets the entries of incarnation order of session id,
// deleted.
func (p *pending) dropSession(id string, order uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep(id, func(e *entry) bool { return e.order != order })
}

// keep keeps the entries of session id that keep says to.
func (p *pending) keep(id string, keep func(*entry) bool) {
	l := p.by[id]
	kept := make([]*entry, 0, len(l))
	for _, e := range l {
		if keep(e) {
			kept = append(kept, e)
		} else {
			p.bytes -= e.size
		}
	}
	switch {
	case len(kept) == 0:
		delete(p.by, id)
	case len(kept) < len(l):
		p.by[id] = kept
	}
}
