// Package egress is the only way out of a sandboxed agent's network: the
// agent runs in a network namespace of its own with nothing but a loopback
// device, and its HTTP and HTTPS traffic goes through a proxy the gateway
// serves on a listening socket made inside that namespace. The proxy lets
// the agent reach the internet (its model's API) and nothing of the
// gateway's host: no loopback, private, link-local (cloud metadata),
// documentation or other special address, no IPv6 address that embeds
// such an IPv4 address (IPv4-compatible, SIIT, NAT64, 6to4) and no
// Teredo address, and none of the addresses of the host's own network
// interfaces (a public one included), unless the operator allows a
// HOST:PORT.
//
// Why a proxy rather than user-mode networking (pasta, slirp4netns): those
// forward any connection the host could make, LAN and metadata addresses
// included, with no rule by address; a proxy decides by the name the agent
// asked for and by every address that name resolves to, dials only the
// addresses it checked (no second lookup for a rebinding name to change),
// and is what agents already support (HTTPS_PROXY), as Claude Code's and
// Codex's sandboxes do.
//
// The proxy serves CONNECT tunnels and plain http:// requests; it forwards
// the latter as net/http/httputil.ReverseProxy does, without the hop-by-hop
// headers. An agent is told that a name cannot be resolved, not why: the
// resolver's error, which names the host's DNS server, goes to the
// gateway's log.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Policy says where agents may connect.
type Policy struct {
	// allowed are the operator's HOST:PORT exceptions, by lower-case host
	// (a name or an address) and port.
	allowed map[string]bool
	// lookup resolves a name; nil is net.DefaultResolver's.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// hostAddrs lists the addresses of the host's network interfaces; nil
	// is net.InterfaceAddrs's.
	hostAddrs func() ([]netip.Addr, error)

	// own is the set hostAddrs last listed, at ownAt; it is replaced, never
	// changed, so a reader may keep it after unlocking mu.
	mu    sync.Mutex
	own   map[netip.Addr]bool
	ownAt time.Time
}

// hostAddrsFresh is how long the host's addresses are used before they are
// listed again: they change rarely, and listing them on every connection
// would cost a netlink dump each.
const hostAddrsFresh = 5 * time.Second

// NewPolicy returns the policy that allows the internet and, beyond it,
// each HOST:PORT of allow (a name, or an IPv4 or IPv6 address, such as
// 127.0.0.1:8089 for a model API on the gateway's host).
func NewPolicy(allow []string) (*Policy, error) {
	p := &Policy{allowed: map[string]bool{}}
	for _, hp := range allow {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			return nil, fmt.Errorf("--agent-egress %q: want HOST:PORT", hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--agent-egress %q: bad port", hp)
		}
		p.allowed[key(host, port)] = true
	}
	return p, nil
}

func key(host, port string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	return strings.ToLower(host) + " " + port
}

// ErrDenied is wrapped by the error of a destination the policy refuses.
var ErrDenied = errors.New("egress denied")

// hiddenError is an error whose detail is for the gateway's log: the
// agent is told only public.
type hiddenError struct {
	public string
	err    error
}

func (e *hiddenError) Error() string { return e.public + ": " + e.err.Error() }
func (e *hiddenError) Unwrap() error { return e.err }

// agentMessage is what the agent is told of err.
func agentMessage(err error) string {
	if h, ok := errors.AsType[*hiddenError](err); ok {
		return h.public
	}
	return err.Error()
}

// Resolve returns the addresses to dial, in order, for host:port, or an
// error that wraps ErrDenied when the policy refuses it. A listed
// HOST:PORT may resolve to any address; otherwise every address the name
// resolves to must be a public one, and none of the host's own, so that a
// name cannot reach the host's services through one of its addresses.
func (p *Policy) Resolve(ctx context.Context, host, port string) ([]netip.AddrPort, error) {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("%w: bad port %q", ErrDenied, port)
	}
	hp := net.JoinHostPort(host, port)
	listed := p.allowed[key(host, port)]
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		lookup := p.lookup
		if lookup == nil {
			lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		// The resolver's error names the DNS server the host uses.
		public := "cannot resolve " + host
		if addrs, err = lookup(ctx, host); err != nil {
			return nil, &hiddenError{public, err}
		}
		if len(addrs) == 0 {
			return nil, &hiddenError{public, errors.New("no address")}
		}
	}
	if !listed {
		own, err := p.ownAddrs()
		if err != nil {
			return nil, &hiddenError{"cannot check " + hp + " against the gateway host's addresses", err}
		}
		for _, a := range addrs {
			if why := refusal(a, own); why != "" {
				return nil, fmt.Errorf("%w: %s is %s (%s); an operator may allow it with --agent-egress %s",
					ErrDenied, hp, why, a.Unmap(), hp)
			}
		}
	}
	var to []netip.AddrPort
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(n))
		if !slices.Contains(to, ap) {
			to = append(to, ap)
		}
	}
	return to, nil
}

// ownAddrs returns the set of the host's addresses (unmapped, without
// zones), listing them again when the last list is older than
// hostAddrsFresh. Failing to list them fails the check: a destination
// that may be the host is not let through.
func (p *Policy) ownAddrs() (map[netip.Addr]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own != nil && time.Since(p.ownAt) < hostAddrsFresh {
		return p.own, nil
	}
	list := p.hostAddrs
	if list == nil {
		list = interfaceAddrs
	}
	addrs, err := list()
	if err != nil {
		return nil, err
	}
	own := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		own[a.Unmap().WithZone("")] = true
	}
	p.own, p.ownAt = own, time.Now()
	return own, nil
}

// interfaceAddrs lists the addresses of the host's network interfaces.
// The proxy runs in the gateway's network namespace, not the agent's, so
// these are the host's: a public address on its interface reaches the
// services bound to 0.0.0.0 or ::, the gateway's own among them.
func interfaceAddrs() ([]netip.Addr, error) {
	nets, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, n := range nets {
		var ip net.IP
		switch n := n.(type) {
		case *net.IPNet:
			ip = n.IP
		case *net.IPAddr:
			ip = n.IP
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// refusal says why a, when not listed, is refused, else "": it is a
// special address, one of own (the host's), or an IPv6 address that
// embeds an IPv4 address refused so.
func refusal(a netip.Addr, own map[netip.Addr]bool) string {
	a = a.Unmap().WithZone("")
	if why := special(a); why != "" {
		return why
	}
	if own[a] {
		return "an address of the gateway's host"
	}
	if v4, how, ok := embedded(a); ok {
		if why := refusal(v4, own); why != "" {
			return fmt.Sprintf("%s of %s, %s", how, v4, why)
		}
	}
	return ""
}

// The IPv6 prefixes whose addresses carry an IPv4 address, and where.
var (
	siitPrefix  = netip.MustParsePrefix("::ffff:0:0:0/96")
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// embedded returns the IPv4 address an IPv6 address carries, and how it
// carries it: a translator (NAT64, SIIT), a relay (6to4) or the host's
// own kernel (IPv4-compatible, over a sit device) delivers a connection
// to such an address to the IPv4 one.
func embedded(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() || a.Is4In6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	switch {
	case [12]byte(b[:12]) == [12]byte{}:
		return netip.AddrFrom4([4]byte(b[12:])), "an IPv4-compatible address", true
	case siitPrefix.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:])), "an IPv4-translated (SIIT) address", true
	case nat64Prefix.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:])), "a NAT64 address", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "a 6to4 address", true
	}
	return netip.Addr{}, "", false
}

// specialRanges are the addresses that are not the internet's.
var specialRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this host"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata among them)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a protocol-assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local translation address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	// Teredo (RFC 4380): an address carries two IPv4 addresses, its
	// server's and, obfuscated, its client's with the client's UDP port,
	// and a relay (the host itself when it runs a Teredo client such as
	// miredo) delivers to them over UDP, to a private or loopback address
	// as readily as to a public one. Rather than decode and check both,
	// the prefix is refused whole: nothing an agent needs is served on a
	// Teredo address.
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:2::/48"), "a benchmarking address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// special says what a is when it is not an internet address, else "".
func special(a netip.Addr) string {
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.what
		}
	}
	return ""
}
