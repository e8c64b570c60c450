package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// AnyHost, in Options.AllowedHosts, turns the Host check off.
const AnyHost = "*"

// hostPolicy refuses requests whose Host or Origin header shows that they
// come from a web page that is not the gateway's: DNS rebinding, where an
// attacker's page at http://rebind.attacker.example:8080 has its name
// resolve to the gateway's address, sends that name in Host; a page of
// another site sends its own origin in Origin.
type hostPolicy struct {
	anyHost bool
	// hosts are the names and addresses accepted in Host besides the
	// loopback ones, normalized.
	hosts map[string]bool
	// origins are the origins of CORS, lower case.
	origins map[string]bool
	log     *slog.Logger
	// logged spaces the log's lines.
	logged refusalLog
}

func newHostPolicy(allowed, corsOrigins []string, log *slog.Logger) *hostPolicy {
	p := &hostPolicy{hosts: map[string]bool{}, origins: map[string]bool{}, log: log}
	for _, h := range allowed {
		if h == AnyHost {
			p.anyHost = true
			continue
		}
		host, _ := splitHostPort(h)
		p.hosts[normalizeHost(host)] = true
	}
	for _, o := range corsOrigins {
		p.origins[strings.ToLower(o)] = true
	}
	return p
}

// CheckAllowedHost reports what is wrong with h as an Options.AllowedHosts
// entry (a host name or address, without a port, or AnyHost), or nil.
func CheckAllowedHost(h string) error {
	switch host, port := splitHostPort(h); {
	case h == AnyHost:
		return nil
	case host == "" || strings.ContainsAny(host, "/?#@ "):
		return fmt.Errorf("%q is not a host name or address", h)
	case port != "":
		return fmt.Errorf("%q names a port: give the host alone (every port is accepted)", h)
	}
	return nil
}

// splitHostPort splits a Host header (or URL host) into its host, without
// brackets, and its port, "" when it has none.
func splitHostPort(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
}

// normalizeHost is host in lower case without a final dot, and an address
// in its canonical form (an IPv4-mapped IPv6 address as IPv4).
func normalizeHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return host
}

// allowedHost reports whether a request may name host (normalized) in its
// Host header.
func (p *hostPolicy) allowedHost(host string) bool {
	return p.anyHost || p.hosts[host] || Loopback(host)
}

// Loopback reports whether host (without a port; brackets allowed) names
// this machine's loopback interface: localhost, 127.0.0.0/8 or ::1.
func Loopback(host string) bool {
	host, _ = splitHostPort(host)
	if host = normalizeHost(host); host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// defaultPort is the port of a URL scheme's that names none.
func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// refusal says why r is refused, or returns "". It tells the headers it
// names clipped.
func (p *hostPolicy) refusal(r *http.Request) string {
	host, port := splitHostPort(r.Host)
	host = normalizeHost(host)
	if !p.allowedHost(host) {
		return fmt.Sprintf("this gateway does not answer to the name %q (a page whose name is made to lead here is refused: "+
			"DNS rebinding); reach it by a name it is configured with, or start it with --allowed-host %s", clip(r.Host), clip(host))
	}
	origin := r.Header.Get("Origin")
	if origin == "" || p.origins[strings.ToLower(origin)] {
		return ""
	}
	// The gateway's own origin: the same host and port as the request's
	// Host. The scheme is not compared: behind a proxy that ends TLS, the
	// console's origin is https while the gateway sees plain HTTP.
	u, err := url.Parse(origin)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		oHost, oPort := splitHostPort(u.Host)
		if oPort == "" {
			oPort = defaultPort(u.Scheme)
		}
		if port == "" {
			port = defaultPort(u.Scheme)
		}
		if normalizeHost(oHost) == host && oPort == port {
			return ""
		}
	}
	return fmt.Sprintf("a web page of origin %q may not call this gateway; list it with --cors-origin to allow it", clip(origin))
}

// exempt reports whether r is a probe or a scrape, which the Host and
// Origin checks leave alone: they change nothing and need no token, and
// probers send any Host (a Kubernetes probe names the pod's address).
func exempt(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return strings.HasPrefix(r.URL.Path, "/grpc.health.v1.Health/")
}

// handler answers a refused request with 403 and a Connect error, and
// logs it, at most one line every refusalLogEvery (with the count of
// refusals it stands for) and its headers clipped; others go on to next.
func (p *hostPolicy) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if exempt(r) {
			next.ServeHTTP(w, r)
			return
		}
		msg := p.refusal(r)
		if msg == "" {
			next.ServeHTTP(w, r)
			return
		}
		if p.log != nil {
			if ok, refused := p.logged.allow(time.Now()); ok {
				p.log.Warn("request refused for its Host or Origin", "client", r.RemoteAddr, "host", clip(r.Host),
					"origin", clip(r.Header.Get("Origin")), "method", clip(r.Method), "path", clip(r.URL.Path), "refused", refused)
			}
		}
		body, _ := json.Marshal(struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{"permission_denied", msg})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write(body)
	})
}
