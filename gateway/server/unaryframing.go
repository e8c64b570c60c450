package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// unaryFraming answers a gRPC or gRPC-Web unary request whose message
// framing is broken (an envelope that promises more bytes than the body
// holds) with invalid_argument, as framing does for streams. connect-go
// reads a unary request before any interceptor runs and reports it as
// internal, which would blame the gateway for the client's bytes. A body
// over readMax (and its envelope's header) is handed on unread, for
// connect-go to refuse as too large.
func unaryFraming(next http.Handler, readMax int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		web, ok := grpcContent(r.Header.Get("Content-Type"))
		if !ok || r.Method != http.MethodPost || serverStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, readMax+envelopeHeader+1))
		if err != nil {
			writeGRPCError(w, r, web, fmt.Sprintf("malformed request: reading the body: %v", err))
			return
		}
		if int64(len(body)) <= readMax+envelopeHeader {
			if msg := truncated(body); msg != "" {
				writeGRPCError(w, r, web, "malformed request: protocol error: "+msg)
				return
			}
		}
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		next.ServeHTTP(w, r)
	})
}

// envelopeHeader is the length of a message envelope's header: a flags
// byte and a 4-byte big-endian length.
const envelopeHeader = 5

// grpcContent reports whether a request of this content type speaks gRPC,
// and whether gRPC-Web (not its base64 form, which connect-go does not
// serve).
func grpcContent(contentType string) (web, ok bool) {
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	switch ct = strings.TrimSpace(ct); {
	case ct == "application/grpc-web" || strings.HasPrefix(ct, "application/grpc-web+"):
		return true, true
	case ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+"):
		return false, true
	}
	return false, false
}

// truncated describes how body's envelopes are cut short, or returns "".
func truncated(body []byte) string {
	for len(body) > 0 {
		if len(body) < envelopeHeader {
			return fmt.Sprintf("incomplete envelope: %d of its %d header bytes", len(body), envelopeHeader)
		}
		n := int64(binary.BigEndian.Uint32(body[1:envelopeHeader]))
		if rest := int64(len(body) - envelopeHeader); rest < n {
			return fmt.Sprintf("promised %d bytes in enveloped message, got %d bytes", n, rest)
		}
		body = body[envelopeHeader+n:]
	}
	return ""
}

// writeGRPCError answers with invalid_argument and message: a
// trailers-only response for gRPC, the trailers in a final frame of the
// body for gRPC-Web.
func writeGRPCError(w http.ResponseWriter, r *http.Request, web bool, message string) {
	h := w.Header()
	h.Set("Content-Type", r.Header.Get("Content-Type"))
	const invalidArgument = "3"
	if !web {
		h.Set("Grpc-Status", invalidArgument)
		h.Set("Grpc-Message", grpcPercentEncode(message))
		w.WriteHeader(http.StatusOK)
		return
	}
	trailers := "grpc-status: " + invalidArgument + "\r\ngrpc-message: " + grpcPercentEncode(message) + "\r\n"
	frame := make([]byte, envelopeHeader, envelopeHeader+len(trailers))
	frame[0] = 0x80 // a trailers frame
	binary.BigEndian.PutUint32(frame[1:], uint32(len(trailers)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(frame, trailers...))
}

// grpcPercentEncode encodes a grpc-message value: bytes outside printable
// ASCII, and '%', as %XX.
func grpcPercentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// readCloser reads from r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (rc readCloser) Close() error { return rc.c.Close() }
