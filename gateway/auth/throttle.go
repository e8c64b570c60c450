package auth

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// DefaultFailureLimit is how many failed authentication attempts a client
// address may make a minute, as serve sets it.
const DefaultFailureLimit = 10

// maxThrottled bounds how many buckets (client addresses, and IPv6 /48s) a
// Throttle tracks at once.
const maxThrottled = 10000

// A refusal of an address the throttle holds back is itself held back
// for refusalHold before it is answered, up to maxHeld refusals at once:
// a client that sends refused requests as fast as it can (50 at a time,
// each with a 1 MiB gzip bomb, made a thousand a second) then gets one
// answer per connection a second, rather than the gateway spending its
// CPU on refusals while its users wait. Past maxHeld the refusal goes at
// once, so that held refusals never hold more than that many connections.
const (
	refusalHold = time.Second
	maxHeld     = 256
)

// siteFactor is how many times the attempts of one address an IPv6 /48,
// the block a site usually has, may make in all.
const siteFactor = 16

// overflowKey names the bucket of the addresses a full table does not
// track, in the log.
const overflowKey = "addresses not tracked"

// Throttle slows down the guessing of credentials: it limits the failed
// authentication attempts of each client address to a bucket of Limit
// attempts that refills at Limit a minute. While an address's bucket is
// empty, every call from it is refused before its credentials are checked,
// so that a right guess cannot be told from a wrong one; a call that
// succeeds costs nothing, and neither does one that carries no credentials
// nor one whose failure guessed nothing (see [NotAGuess]).
//
// Addresses are those of the TCP peers: behind a proxy or load balancer
// every client has the proxy's address and they share one bucket. IPv6
// addresses count by /64, the block one host usually has to itself, and
// by /48 too, the block a site usually has, whose bucket holds siteFactor
// times as many attempts: a client cannot multiply its attempts by
// rotating through the /64s of its site.
//
// Only buckets that hold something are tracked: one in use by a call being
// checked, or that is not full. A full, idle bucket is forgotten, as it is
// the same as a new one. At most maxThrottled buckets are tracked, so that
// memory stays bounded however many addresses call; while that many are
// in use (that many addresses failed within the last minute), the
// addresses not tracked share one more bucket of Limit attempts, so that
// rotating through more addresses than are tracked gains nothing.
// Throttle is safe for concurrent use.
type Throttle struct {
	limit float64
	log   *slog.Logger
	now   func() time.Time

	mu    sync.Mutex
	addrs map[string]*bucket
	lru   list.List // of *bucket, most recently seen first
	max   int
	// overflow is the bucket of the addresses not tracked; overflowLogged
	// is when its use was last logged.
	overflow       *bucket
	overflowLogged time.Time

	// held has a token for each refusal being held back; hold waits.
	held chan struct{}
	hold func(ctx context.Context, d time.Duration)
}

// bucket is the attempts of one address (or IPv6 /48).
type bucket struct {
	key     string
	limit   float64   // attempts it holds, and earns a minute
	tokens  float64   // attempts left, as of at
	at      time.Time // of the last refill
	pending int       // calls being checked: each may fail
	elem    *list.Element
}

// ticket is the buckets a call begin let through counts against, until
// end.
type ticket struct {
	buckets []*bucket
}

// NewThrottle returns a Throttle that allows each client address limit
// failed attempts a minute (limit > 0). It logs to log (nil:
// slog.Default()) when an address runs out.
func NewThrottle(limit int, log *slog.Logger) *Throttle {
	if log == nil {
		log = slog.Default()
	}
	l := float64(max(limit, 1))
	return &Throttle{limit: l, log: log, now: time.Now, addrs: map[string]*bucket{}, max: maxThrottled,
		overflow: &bucket{key: overflowKey, limit: l, tokens: l},
		held:     make(chan struct{}, maxHeld), hold: sleep}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// holdBack holds back the refusal of a call the throttle refused (see
// refusalHold), unless maxHeld are held already.
func (t *Throttle) holdBack(ctx context.Context) {
	select {
	case t.held <- struct{}{}:
	default:
		return
	}
	defer func() { <-t.held }()
	t.hold(ctx, refusalHold)
}

// throttleKey is a bucket a peer address counts against, and how many
// times the limit it holds.
type throttleKey struct {
	key    string
	factor float64
}

// clientKeys are the buckets of a peer address, HOST:PORT: the IPv4
// address, or the /64 and the /48 of an IPv6 one; anything else as it is.
func clientKeys(addr string) []throttleKey {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return []throttleKey{{addr, 1}}
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return []throttleKey{{ip.String(), 1}}
	}
	host, _ := ip.Prefix(64)
	site, _ := ip.Prefix(48)
	return []throttleKey{{host.String(), 1}, {site.String(), siteFactor}}
}

// refill adds the attempts earned since b.at. t.mu must be held.
func (t *Throttle) refill(b *bucket, now time.Time) {
	b.tokens = min(b.limit, b.tokens+now.Sub(b.at).Minutes()*b.limit)
	b.at = now
}

// idle reports whether b holds nothing: no call is being checked, and it
// is full. t.mu must be held.
func (t *Throttle) idle(b *bucket, now time.Time) bool {
	if b.pending > 0 {
		return false
	}
	t.refill(b, now)
	return b.tokens >= b.limit
}

// forgetIfIdle stops tracking b if it holds nothing. t.mu must be held.
func (t *Throttle) forgetIfIdle(b *bucket, now time.Time) {
	if b.elem != nil && t.idle(b, now) {
		t.lru.Remove(b.elem)
		b.elem = nil
		delete(t.addrs, b.key)
	}
}

// bucket returns the bucket of k, refilled: the tracked one, a new one, or
// when the table is full of buckets that hold something, the overflow
// bucket. t.mu must be held.
func (t *Throttle) bucket(k throttleKey, now time.Time) *bucket {
	if b := t.addrs[k.key]; b != nil {
		t.lru.MoveToFront(b.elem)
		t.refill(b, now)
		return b
	}
	// Room is made by forgetting the least recently seen buckets that hold
	// nothing: one seen a minute ago and not in use is full again.
	for len(t.addrs) >= t.max {
		e := t.lru.Back()
		if e == nil {
			break
		}
		b := e.Value.(*bucket)
		if t.forgetIfIdle(b, now); b.elem != nil {
			break
		}
	}
	if len(t.addrs) >= t.max {
		if now.Sub(t.overflowLogged) >= time.Minute {
			t.overflowLogged = now
			t.log.Warn("authentication failures throttled: more client addresses failed within the last minute than are tracked; "+
				"the others share one bucket of attempts", "tracked", t.max, "limit_per_minute", t.limit)
		}
		t.refill(t.overflow, now)
		return t.overflow
	}
	limit := t.limit * k.factor
	b := &bucket{key: k.key, limit: limit, tokens: limit, at: now}
	b.elem = t.lru.PushFront(b)
	t.addrs[k.key] = b
	return b
}

// begin is called before a call from addr is authenticated. It returns how
// long the address must wait before trying again, or a ticket when the
// call may go on; then end must follow, with the ticket. Calls being
// checked count as failing, so that a burst of concurrent guesses gets no
// more than the bucket holds.
func (t *Throttle) begin(addr string) (*ticket, time.Duration) {
	keys := clientKeys(addr)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := &ticket{}
	var wait time.Duration
	for _, k := range keys {
		b := t.bucket(k, now)
		if slices.Contains(tk.buckets, b) {
			continue // the overflow bucket, for both of an IPv6 address's keys
		}
		tk.buckets = append(tk.buckets, b)
		if left := b.tokens - float64(b.pending); left < 1 {
			wait = max(wait, time.Duration((1-left)/b.limit*float64(time.Minute)), time.Millisecond)
		}
		b.pending++ // in use: the next key's lookup does not forget it
	}
	if wait > 0 {
		for _, b := range tk.buckets {
			b.pending--
			t.forgetIfIdle(b, now) // a new bucket, when another one refused
		}
		return nil, wait
	}
	return tk, 0
}

// end records the outcome of the call begin gave tk.
func (t *Throttle) end(tk *ticket, failed bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range tk.buckets {
		b.pending--
		t.refill(b, now)
		if failed {
			b.tokens--
			if b.tokens < 1 && b.tokens >= 0 {
				t.log.Warn("authentication failures throttled: this client address made too many failed attempts; its calls are refused until its limit refills",
					"client", b.key, "limit_per_minute", b.limit)
			}
		}
		t.forgetIfIdle(b, now)
	}
}

// NotAGuess marks err, an authentication failure, as one that could not be
// a guess of credentials: a token that is genuine but expired, or one that
// could not be checked because the issuer's keys could not be fetched, or
// a replica's assertion that verifies but comes from a clock too far
// apart. A [Throttle] does not count it, so that an outage or a clock's
// error does not lock out every client that shares an address (all of
// them, behind a load balancer). err keeps its message, and [errors.Is]
// and [errors.As] still reach what it wraps. A failure that a wrong
// credential can cause (an unknown token, a bad signature, another
// audience or issuer) must not be marked.
func NotAGuess(err error) error {
	if err == nil {
		return nil
	}
	return &notGuess{err}
}

// notGuess is an error marked by NotAGuess.
type notGuess struct{ error }

func (e *notGuess) Unwrap() error { return e.error }

// countsAsGuess reports whether a failed authentication, err, counts
// against a Throttle: not when the request carried no credentials, nor
// when the failure is marked NotAGuess.
func countsAsGuess(err error) bool {
	_, marked := errors.AsType[*notGuess](err)
	return !marked && !errors.Is(err, errNoToken)
}
