package auth

import (
	"container/list"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// DefaultFailureLimit is how many failed authentication attempts a client
// address may make a minute, as serve sets it.
const DefaultFailureLimit = 10

// maxThrottled bounds how many client addresses a Throttle remembers; past
// it the one seen least recently is forgotten (and would start afresh).
const maxThrottled = 10000

// Throttle slows down the guessing of credentials: it limits the failed
// authentication attempts of each client address to a bucket of Limit
// attempts that refills at Limit a minute. While an address's bucket is
// empty, every call from it is refused before its credentials are checked,
// so that a right guess cannot be told from a wrong one; a call that
// succeeds costs nothing, and neither does one that carries no credentials.
//
// Addresses are those of the TCP peers: behind a proxy or load balancer
// every client has the proxy's address and they share one bucket. IPv6
// addresses count by /64, the block one host usually has to itself. At most
// maxThrottled addresses are remembered (the least recently seen is
// forgotten first), so memory stays bounded however many addresses call.
// Throttle is safe for concurrent use.
type Throttle struct {
	limit float64
	log   *slog.Logger
	now   func() time.Time

	mu    sync.Mutex
	addrs map[string]*list.Element // of *bucket, in lru
	lru   list.List                // most recently seen first
	max   int
}

// bucket is one address's attempts.
type bucket struct {
	key     string
	tokens  float64   // attempts left, as of at
	at      time.Time // of the last refill
	pending int       // calls being checked: each may fail
}

// NewThrottle returns a Throttle that allows each client address limit
// failed attempts a minute (limit > 0). It logs to log (nil:
// slog.Default()) when an address runs out.
func NewThrottle(limit int, log *slog.Logger) *Throttle {
	if log == nil {
		log = slog.Default()
	}
	return &Throttle{limit: float64(max(limit, 1)), log: log, now: time.Now, addrs: map[string]*list.Element{}, max: maxThrottled}
}

// clientKey is the bucket of a peer address, HOST:PORT: the IPv4 address,
// or the /64 of an IPv6 one; anything else as it is.
func clientKey(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// refill adds the attempts earned since b.at. t.mu must be held.
func (t *Throttle) refill(b *bucket, now time.Time) {
	b.tokens = min(t.limit, b.tokens+now.Sub(b.at).Minutes()*t.limit)
	b.at = now
}

// begin is called before a call from addr is authenticated. It returns how
// long the address must wait before trying again, or 0 when the call may
// go on; then end must follow. Calls being checked count as failing, so
// that a burst of concurrent guesses gets no more than the bucket holds.
func (t *Throttle) begin(addr string) (wait time.Duration) {
	key := clientKey(addr)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var b *bucket
	if e := t.addrs[key]; e != nil {
		t.lru.MoveToFront(e)
		b = e.Value.(*bucket)
		t.refill(b, now)
	} else {
		if len(t.addrs) >= t.max {
			old := t.lru.Back()
			t.lru.Remove(old)
			delete(t.addrs, old.Value.(*bucket).key)
		}
		b = &bucket{key: key, tokens: t.limit, at: now}
		t.addrs[key] = t.lru.PushFront(b)
	}
	if left := b.tokens - float64(b.pending); left < 1 {
		return max(time.Duration((1-left)/t.limit*float64(time.Minute)), time.Millisecond)
	}
	b.pending++
	return 0
}

// end records the outcome of a call begin let through.
func (t *Throttle) end(addr string, failed bool) {
	key := clientKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.addrs[key]
	if e == nil {
		return // forgotten meanwhile
	}
	b := e.Value.(*bucket)
	b.pending--
	if !failed {
		return
	}
	t.refill(b, t.now())
	b.tokens--
	if b.tokens < 1 && b.tokens >= 0 {
		t.log.Warn("authentication failures throttled: this client address made too many failed attempts; its calls are refused until its limit refills",
			"client", key, "limit_per_minute", t.limit)
	}
}
