package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// dialTimeout bounds one connection to a destination.
const dialTimeout = 30 * time.Second

// Proxy serves one agent's HTTP proxy: CONNECT tunnels (HTTPS, and any TCP
// a client tunnels) and plain http:// requests, each destination checked by
// the Policy.
type Proxy struct {
	policy *Policy
	log    *slog.Logger
	srv    *http.Server
	// transport forwards plain http:// requests, dialling through the
	// policy.
	transport *http.Transport
	tunnels   sync.WaitGroup
	// ctx ends when the proxy is closed, ending its tunnels.
	ctx    context.Context
	cancel context.CancelFunc
}

// Serve serves the proxy on l until Close. log receives a line for each
// refused destination.
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
	x.srv = &http.Server{Handler: x, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
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

// dial connects to addr ("host:port") if the policy allows it.
func (x *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	to, err := x.policy.Resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, "tcp", to.String())
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
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	res, err := x.transport.RoundTrip(out)
	if err != nil {
		x.refuse(w, r.URL.Host, err)
		return
	}
	defer res.Body.Close()
	for k, vs := range res.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// refuse answers a request whose destination could not be reached: 403
// when the policy refused it, 502 otherwise.
func (x *Proxy) refuse(w http.ResponseWriter, dest string, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, ErrDenied) {
		code = http.StatusForbidden
		x.log.Warn("agent egress refused", "destination", dest, "error", err.Error())
	}
	http.Error(w, "acp-gateway egress proxy: "+err.Error(), code)
}

// tunnel serves CONNECT: it dials the destination and copies both ways
// until either side ends.
func (x *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	up, err := x.dial(ctx, "tcp", r.Host)
	cancel()
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
