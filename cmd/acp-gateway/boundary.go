package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"

	"github.com/acp-gateway/acp-gateway/gateway/server"
)

// checkBoundary checks --listen, --allowed-host and --insecure-no-auth: a
// gateway without authentication listens on loopback only, unless the
// operator says --insecure-no-auth.
func (cfg *serveConfig) checkBoundary() error {
	host, _, err := net.SplitHostPort(cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", cfg.listen, err)
	}
	for _, h := range cfg.allowedHosts {
		if err := server.CheckAllowedHost(h); err != nil {
			return fmt.Errorf("--allowed-host: %v", err)
		}
	}
	authn := cfg.authConfigured()
	switch {
	case authn && cfg.insecureNoAuth:
		return errors.New("--insecure-no-auth with --auth-tokens or --oidc-issuer: authentication is on; drop --insecure-no-auth")
	case !authn && !cfg.insecureNoAuth && !server.Loopback(host):
		return fmt.Errorf("--listen %s is reachable from other machines, and without authentication whoever reaches it runs agents as you: "+
			"give --auth-tokens FILE or --oidc-issuer URL, listen on 127.0.0.1, or take the risk with --insecure-no-auth", cfg.listen)
	}
	return nil
}

// hostsAllowed are the names requests may give in Host besides loopback
// ones: --allowed-host, the --listen host (unless it is every interface)
// and the host of advertise, which other replicas forward requests to.
func (cfg *serveConfig) hostsAllowed(advertise string) []string {
	hosts := slices.Clone(cfg.allowedHosts)
	add := func(host string) {
		if a, err := netip.ParseAddr(host); host != "" && (err != nil || !a.IsUnspecified()) && !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	if host, _, err := net.SplitHostPort(cfg.listen); err == nil {
		add(host)
	}
	if u, err := url.Parse(advertise); err == nil {
		add(u.Hostname())
	}
	return hosts
}

// warnBoundary logs the unsafe choices of the network boundary; addr is
// the address serve listens on.
func (cfg *serveConfig) warnBoundary(log *slog.Logger, addr string) {
	switch {
	case cfg.insecureNoAuth && server.Loopback(addr):
		log.Info("--insecure-no-auth has no effect: the --listen address is loopback, which other machines cannot reach", "addr", addr)
	case cfg.insecureNoAuth:
		log.Warn("serving without authentication on an address other machines may reach (--insecure-no-auth): "+
			"whoever reaches it runs agents as this gateway's user", "addr", addr)
	}
	if slices.Contains(cfg.allowedHosts, server.AnyHost) {
		log.Warn("--allowed-host *: any Host is accepted, so a web page whose name is made to resolve to this gateway's address " +
			"is served (DNS rebinding); list the gateway's names instead")
	}
}
