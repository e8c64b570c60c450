// Package server serves the acp.v2 SessionService over Connect, gRPC and
// gRPC-Web on one HTTP listener (HTTP/1.1 and unencrypted HTTP/2), with
// health endpoints beside it.
package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// DefaultListen is the address served when none is configured.
const DefaultListen = "127.0.0.1:8080"

// readHeaderTimeout bounds how long a client may take to send headers. There
// is deliberately no ReadTimeout or WriteTimeout: they would cut long-lived
// server streams.
const readHeaderTimeout = 10 * time.Second

// Server is one gateway HTTP server.
type Server struct {
	http *http.Server
	// base is cancelled on shutdown so that streaming handlers end;
	// http.Server.Shutdown alone does not cancel their contexts.
	base   context.Context
	cancel context.CancelFunc
}

// New returns a Server for svc.
func New(svc acpv2connect.SessionServiceHandler) *Server {
	mux := http.NewServeMux()
	mux.Handle(acpv2connect.NewSessionServiceHandler(svc))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	base, cancel := context.WithCancel(context.Background())
	s := &Server{base: base, cancel: cancel}
	s.http = &http.Server{
		Handler:           mux,
		Protocols:         protocols,
		ReadHeaderTimeout: readHeaderTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	s.http.RegisterOnShutdown(cancel)
	return s
}

// Serve serves on l until Shutdown. It returns nil after a clean shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, cancels streams and waits for
// handlers to return or ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	return s.http.Shutdown(ctx)
}
