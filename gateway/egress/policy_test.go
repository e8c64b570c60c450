package egress

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestPolicy(t *testing.T) {
	p, err := NewPolicy([]string{"127.0.0.1:8089", "models.internal:443", "[::1]:9000"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{
		"api.example.com":  {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"rebind.example":   {"93.184.215.14", "127.0.0.1"},
		"metadata.example": {"169.254.169.254"},
		"models.internal":  {"10.1.2.3"},
		"mapped.example":   {"::ffff:192.168.1.1"},
	}
	p.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		var addrs []netip.Addr
		for _, a := range names[host] {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		return addrs, nil
	}
	for _, c := range []struct {
		host, port string
		want       string // the address dialled; "" when refused
	}{
		{"api.example.com", "443", "93.184.215.14:443"},
		{"93.184.215.14", "80", "93.184.215.14:80"},
		{"127.0.0.1", "8089", "127.0.0.1:8089"}, // listed
		{"::1", "9000", "[::1]:9000"},           // listed
		{"models.internal", "443", "10.1.2.3:443"},
		{"127.0.0.1", "8080", ""},
		{"127.0.0.2", "8089", ""},
		{"localhost", "8089", ""}, // not the listed spelling, and resolves to loopback
		{"models.internal", "80", ""},
		{"rebind.example", "443", ""}, // one public address is not enough
		{"metadata.example", "80", ""},
		{"169.254.169.254", "80", ""},
		{"mapped.example", "443", ""},
		{"::ffff:127.0.0.1", "8080", ""},
		{"fd00::1", "443", ""},
		{"0.0.0.0", "80", ""},
		{"api.example.com", "0", ""},
	} {
		got, err := p.Resolve(context.Background(), c.host, c.port)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s:%s allowed as %v", c.host, c.port, got)
		case c.want == "" && !errors.Is(err, ErrDenied) && c.host != "localhost":
			t.Errorf("%s:%s: %v, want ErrDenied", c.host, c.port, err)
		case c.want != "" && (err != nil || got.String() != c.want):
			t.Errorf("%s:%s: %v, %v, want %s", c.host, c.port, got, err, c.want)
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
