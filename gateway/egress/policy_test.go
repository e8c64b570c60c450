package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testLookup resolves names from names.
func testLookup(names map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		var addrs []netip.Addr
		for _, a := range names[host] {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		return addrs, nil
	}
}

// testHostAddrs lists addrs as the host's.
func testHostAddrs(addrs ...string) func() ([]netip.Addr, error) {
	return func() ([]netip.Addr, error) {
		var as []netip.Addr
		for _, a := range addrs {
			as = append(as, netip.MustParseAddr(a))
		}
		return as, nil
	}
}

func TestPolicy(t *testing.T) {
	p, err := NewPolicy([]string{"127.0.0.1:8089", "models.internal:443", "[::1]:9000", "[64:ff9b::a00:1]:443", "93.184.215.99:8080"})
	if err != nil {
		t.Fatal(err)
	}
	p.lookup = testLookup(map[string][]string{
		"api.example.com":  {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"rebind.example":   {"93.184.215.14", "127.0.0.1"},
		"metadata.example": {"169.254.169.254"},
		"models.internal":  {"10.1.2.3"},
		"mapped.example":   {"::ffff:192.168.1.1"},
		"nat64.example":    {"93.184.215.14", "64:ff9b::a9fe:a9fe"},
		"public64.example": {"64:ff9b::5db8:d70e"},
		"self.example":     {"93.184.215.99"},
	})
	p.hostAddrs = testHostAddrs("127.0.0.1", "::1", "93.184.215.99", "2606:4700::99", "fe80::1")
	for _, c := range []struct {
		host, port string
		want       string // the address dialled first; "" when refused
	}{
		{"api.example.com", "443", "93.184.215.14:443"},
		{"93.184.215.14", "80", "93.184.215.14:80"},
		{"127.0.0.1", "8089", "127.0.0.1:8089"}, // listed
		{"::1", "9000", "[::1]:9000"},           // listed
		{"models.internal", "443", "10.1.2.3:443"},
		{"127.0.0.1", "8080", ""},
		{"127.0.0.2", "8089", ""},
		{"localhost", "8089", ""}, // not the listed spelling, and resolves to nothing
		{"models.internal", "80", ""},
		{"rebind.example", "443", ""}, // one public address is not enough
		{"metadata.example", "80", ""},
		{"169.254.169.254", "80", ""},
		{"mapped.example", "443", ""},
		{"::ffff:127.0.0.1", "8080", ""},
		{"fd00::1", "443", ""},
		{"0.0.0.0", "80", ""},
		{"api.example.com", "0", ""},

		// IPv6 addresses that embed an IPv4 one are judged by it.
		{"::127.0.0.1", "80", ""},          // IPv4-compatible
		{"::ffff:0:7f00:1", "80", ""},      // SIIT
		{"64:ff9b::a00:1", "80", ""},       // NAT64
		{"64:ff9b::a9fe:a9fe", "80", ""},   // NAT64, metadata
		{"2002:7f00:1::1", "80", ""},       // 6to4
		{"2002:a9fe:a9fe::1", "80", ""},    // 6to4, metadata
		{"64:ff9b::5db8:d763", "6379", ""}, // NAT64 of the host's public address
		{"nat64.example", "443", ""},
		{"64:ff9b::a00:1", "443", "[64:ff9b::a00:1]:443"}, // listed
		{"64:ff9b::5db8:d70e", "443", "[64:ff9b::5db8:d70e]:443"},
		{"public64.example", "443", "[64:ff9b::5db8:d70e]:443"},
		{"2002:5db8:d70e::1", "443", "[2002:5db8:d70e::1]:443"},
		{"::5db8:d70e", "443", "[::5db8:d70e]:443"},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", "443", "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443"},

		// Other special ranges.
		{"100::1", "80", ""}, // discard-only
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "443", ""}, // Teredo
		{"2001::1", "443", ""},
		{"2001:2::1", "443", ""},
		{"2001:db8::1", "443", ""},
		{"192.0.2.1", "443", ""},
		{"198.51.100.7", "443", ""},
		{"203.0.113.9", "443", ""},

		// The host's own addresses.
		{"93.184.215.99", "6379", ""},
		{"::ffff:93.184.215.99", "6379", ""},
		{"2606:4700::99", "443", ""},
		{"self.example", "443", ""},
		{"93.184.215.99", "8080", "93.184.215.99:8080"}, // listed
	} {
		got, err := p.Resolve(context.Background(), c.host, c.port)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s:%s allowed as %v", c.host, c.port, got)
		case c.want == "" && !errors.Is(err, ErrDenied) && c.host != "localhost":
			t.Errorf("%s:%s: %v, want ErrDenied", c.host, c.port, err)
		case c.want != "" && (err != nil || len(got) == 0 || got[0].String() != c.want):
			t.Errorf("%s:%s: %v, %v, want %s first", c.host, c.port, got, err, c.want)
		}
	}
}

func TestPolicySaysWhy(t *testing.T) {
	p, _ := NewPolicy(nil)
	p.hostAddrs = testHostAddrs("93.184.215.99")
	for addr, want := range map[string]string{
		"2002:a9fe:a9fe::1":     "a 6to4 address of 169.254.169.254, a link-local address",
		"64:ff9b::7f00:1":       "a NAT64 address of 127.0.0.1, a loopback address",
		"::ffff:0:a00:1":        "an IPv4-translated (SIIT) address of 10.0.0.1, a private address",
		"::127.0.0.1":           "an IPv4-compatible address of 127.0.0.1, a loopback address",
		"93.184.215.99":         "an address of the gateway's host",
		"2001:0:4136:e378::1":   "a Teredo address",
		"::ffff:93.184.215.99":  "an address of the gateway's host",
		"2002:5db8:d763::1":     "a 6to4 address of 93.184.215.99, an address of the gateway's host",
		"2001:db8:1234::1":      "a documentation address",
		"100::":                 "a discard-only address",
		"64:ff9b:1::a00:1":      "a local translation address",
		"2001:0:4136:e378:8::1": "a Teredo address",
	} {
		_, err := p.Resolve(context.Background(), addr, "443")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", addr, err, want)
		}
	}
}

func TestResolveReturnsEveryAddressOnce(t *testing.T) {
	p, _ := NewPolicy(nil)
	p.hostAddrs = testHostAddrs()
	p.lookup = testLookup(map[string][]string{"multi.example": {"93.184.215.14", "::ffff:93.184.215.14", "2606:2800:21f:cb07::1", "93.184.215.15"}})
	got, err := p.Resolve(context.Background(), "multi.example", "443")
	want := []netip.AddrPort{
		netip.MustParseAddrPort("93.184.215.14:443"),
		netip.MustParseAddrPort("[2606:2800:21f:cb07::1]:443"),
		netip.MustParseAddrPort("93.184.215.15:443"),
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("%v, %v; want %v", got, err, want)
	}
}

// TestPolicyListsTheHostsAddressesNowAndThen: the host's addresses are
// listed once for many connections, and again when they may have changed.
func TestPolicyListsTheHostsAddressesNowAndThen(t *testing.T) {
	p, _ := NewPolicy(nil)
	var calls atomic.Int32
	var own atomic.Value
	own.Store("93.184.215.98")
	p.hostAddrs = func() ([]netip.Addr, error) {
		calls.Add(1)
		return []netip.Addr{netip.MustParseAddr(own.Load().(string))}, nil
	}
	for range 100 {
		if _, err := p.Resolve(context.Background(), "93.184.215.98", "6379"); !errors.Is(err, ErrDenied) {
			t.Fatalf("the host's address: %v", err)
		}
		if _, err := p.Resolve(context.Background(), "93.184.215.99", "6379"); err != nil {
			t.Fatalf("another address: %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("listed the host's addresses %d times, want 1", n)
	}
	// The host gets a new address; the old list is used a while longer.
	own.Store("93.184.215.99")
	if _, err := p.Resolve(context.Background(), "93.184.215.99", "6379"); err != nil {
		t.Fatalf("before the list expires: %v", err)
	}
	p.mu.Lock()
	p.ownAt = p.ownAt.Add(-hostAddrsFresh)
	p.mu.Unlock()
	if _, err := p.Resolve(context.Background(), "93.184.215.99", "6379"); !errors.Is(err, ErrDenied) {
		t.Errorf("the host's new address: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("listed the host's addresses %d times, want 2", n)
	}
	// A listed destination does not need the list.
	p.allowed[key("93.184.215.99", "6379")] = true
	p.hostAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink broke") }
	p.mu.Lock()
	p.ownAt = time.Time{}
	p.mu.Unlock()
	if _, err := p.Resolve(context.Background(), "93.184.215.99", "6379"); err != nil {
		t.Errorf("listed: %v", err)
	}
	// Without the list, nothing else passes.
	if got, err := p.Resolve(context.Background(), "93.184.215.14", "443"); err == nil {
		t.Errorf("allowed %v without the host's addresses", got)
	}
}

// TestPolicyRefusesTheRealHostsAddresses: by default, every address of
// this host's interfaces is refused.
func TestPolicyRefusesTheRealHostsAddresses(t *testing.T) {
	nets, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	p, _ := NewPolicy(nil)
	for _, n := range nets {
		ipn, ok := n.(*net.IPNet)
		if !ok {
			continue
		}
		if got, err := p.Resolve(context.Background(), ipn.IP.String(), "6379"); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, %v", ipn.IP, got, err)
		}
	}
}

func TestNewPolicyChecksItsList(t *testing.T) {
	for _, bad := range []string{"127.0.0.1", ":80", "host:http", "host:0", "host:70000"} {
		if _, err := NewPolicy([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
