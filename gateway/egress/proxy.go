package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"
)

// dialTimeout bounds the resolution of a destination and the connection to
// it.
const dialTimeout = 30 * time.Second

// minDialShare is the least time one of a destination's addresses is given
// to connect before the next is tried (as net.Dialer gives a name's).
var minDialShare = 2 * time.Second

// Proxy serves one agent's HTTP proxy: CONNECT tunnels (HTTPS, and any TCP
// a client tunnels) and plain http:// requests, each destination checked by
// the Policy.
type Proxy struct {
	policy *Policy
	log    *slog.Logger
	srv    *http.Server
	// forward forwards plain http:// requests through transport, which
	// dials through the policy.
	forward   *httputil.ReverseProxy
	transport *http.Transport
	tunnels   sync.WaitGroup
	// ctx ends when the proxy is closed, ending its tunnels and the
	// requests it forwards.
	ctx    context.Context
	cancel context.CancelFunc
}

// Serve serves the proxy on l until Close. log receives a line for each
// destination refused or not reached.
func (p *Policy) Serve(l net.Listener, log *slog.Logger) *Proxy {
	x := &Proxy{policy: p, log: log}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           x.dial,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	errorLog := slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	x.forward = &httputil.ReverseProxy{
		// A proxy's request has the absolute URL (and Host) of its
		// destination, which the outgoing request keeps; ReverseProxy has
		// removed the hop-by-hop headers (Connection and those it names,
		// Proxy-Connection, Keep-Alive, Proxy-Authenticate,
		// Proxy-Authorization, Te, Trailer, Transfer-Encoding, Upgrade)
		// and the Forwarded and X-Forwarded-* ones, and removes the
		// response's hop-by-hop headers too.
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     x.transport,
		FlushInterval: -1, // streams (server-sent events) as they come
		ErrorLog:      errorLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			x.refuse(w, r.URL.Host, err)
		},
	}
	x.srv = &http.Server{Handler: x, ReadHeaderTimeout: 30 * time.Second, ErrorLog: errorLog}
	go func() { _ = x.srv.Serve(l) }()
	return x
}

// Close stops the proxy and ends its tunnels.
func (x *Proxy) Close() {
	x.cancel()
	_ = x.srv.Close()
	x.transport.CloseIdleConnections()
	x.tunnels.Wait()
}

// dial connects to addr ("host:port") if the policy allows it, to the
// first of its addresses that answers.
func (x *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	to, err := x.policy.Resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return dialFirst(ctx, to, func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a.String())
	})
}

// dialFirst tries addrs in order until one connects, giving each an equal
// share of the time left before ctx's deadline, at least minDialShare. It
// returns the first error when none connects.
func dialFirst(ctx context.Context, addrs []netip.AddrPort, dial func(context.Context, netip.AddrPort) (net.Conn, error)) (net.Conn, error) {
	var first error
	for i, a := range addrs {
		if err := ctx.Err(); err != nil {
			if first == nil {
				first = err
			}
			break
		}
		c, err := func() (net.Conn, error) {
			ctx := ctx
			if deadline, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
				share := max(time.Until(deadline)/time.Duration(len(addrs)-i), minDialShare)
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, share)
				defer cancel()
			}
			return dial(ctx, a)
		}()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("no address to dial")
	}
	return nil, first
}

// ServeHTTP implements http.Handler.
func (x *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		x.tunnel(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "acp-gateway egress proxy: send absolute http:// URLs, or CONNECT for anything else", http.StatusBadRequest)
		return
	}
	// Closing the proxy ends the request, and the connection a protocol
	// switch (101) would have made of it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(x.ctx, cancel)()
	x.forward.ServeHTTP(w, r.WithContext(ctx))
}

// refuse answers a request whose destination could not be reached: 403
// when the policy refused it, 502 otherwise. The agent is told what
// agentMessage lets it know; the log has the whole error.
func (x *Proxy) refuse(w http.ResponseWriter, dest string, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, ErrDenied) {
		code = http.StatusForbidden
		x.log.Warn("agent egress refused", "destination", dest, "error", err.Error())
	} else {
		x.log.Info("agent egress failed", "destination", dest, "error", err.Error())
	}
	http.Error(w, "acp-gateway egress proxy: "+agentMessage(err), code)
}

// tunnel serves CONNECT: it dials the destination and copies both ways
// until either side ends.
func (x *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := x.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		x.refuse(w, r.Host, err)
		return
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		up.Close()
		return
	}
	down, buf, err := rc.Hijack()
	if err != nil {
		up.Close()
		return
	}
	x.tunnels.Add(1)
	go func() {
		defer x.tunnels.Done()
		defer down.Close()
		defer up.Close()
		stop := context.AfterFunc(x.ctx, func() { up.Close(); down.Close() })
		defer stop()
		done := make(chan struct{})
		go func() {
			// What the client sent after its CONNECT is in buf.
			_, _ = io.Copy(up, io.MultiReader(buf, down))
			if c, ok := up.(*net.TCPConn); ok {
				_ = c.CloseWrite()
			}
			close(done)
		}()
		_, _ = io.Copy(down, up)
		if c, ok := down.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}
		<-done
	}()
}
