// Package egress is the only way out of a sandboxed agent's network: the
// agent runs in a network namespace of its own with nothing but a loopback
// device, and its HTTP and HTTPS traffic goes through a proxy the gateway
// serves on a listening socket made inside that namespace. The proxy lets
// the agent reach the internet (its model's API) and nothing of the
// gateway's host: no loopback, private, link-local (cloud metadata) or
// other special address, unless the operator allows a HOST:PORT.
//
// Why a proxy rather than user-mode networking (pasta, slirp4netns): those
// forward any connection the host could make, LAN and metadata addresses
// included, with no rule by address; a proxy decides by the name the agent
// asked for and by every address that name resolves to, dials the address
// it checked (no second lookup for a rebinding name to change), and is
// what agents already support (HTTPS_PROXY), as Claude Code's and Codex's
// sandboxes do.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Policy says where agents may connect.
type Policy struct {
	// allowed are the operator's HOST:PORT exceptions, by lower-case host
	// (a name or an address) and port.
	allowed map[string]bool
	// lookup resolves a name; nil is net.DefaultResolver's.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

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

// Resolve returns the address to dial for host:port, or an error that wraps
// ErrDenied when the policy refuses it. A listed HOST:PORT may resolve to
// any address; otherwise every address the name resolves to must be a
// public one, so that a name cannot reach the host's services through one
// of its addresses.
func (p *Policy) Resolve(ctx context.Context, host, port string) (netip.AddrPort, error) {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return netip.AddrPort{}, fmt.Errorf("%w: bad port %q", ErrDenied, port)
	}
	listed := p.allowed[key(host, port)]
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		lookup := p.lookup
		if lookup == nil {
			lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		if addrs, err = lookup(ctx, host); err != nil {
			return netip.AddrPort{}, err
		}
		if len(addrs) == 0 {
			return netip.AddrPort{}, fmt.Errorf("%s has no address", host)
		}
	}
	if !listed {
		for _, a := range addrs {
			if why := special(a.Unmap()); why != "" {
				return netip.AddrPort{}, fmt.Errorf("%w: %s is %s (%s); an operator may allow it with --agent-egress %s",
					ErrDenied, net.JoinHostPort(host, port), why, a.Unmap(), net.JoinHostPort(host, port))
			}
		}
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(n)), nil
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
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local translation address"},
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
