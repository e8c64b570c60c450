package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"mime"
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
		ct, web, ok := grpcContent(r.Header.Get("Content-Type"))
		if !ok || r.Method != http.MethodPost || serverStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, readMax+envelopeHeader+1))
		if err != nil {
			writeGRPCError(w, ct, web, fmt.Sprintf("malformed request: reading the body: %v", err))
			return
		}
		if int64(len(body)) <= readMax+envelopeHeader {
			if msg := truncated(body); msg != "" {
				writeGRPCError(w, ct, web, "malformed request: protocol error: "+msg)
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

// grpcContent returns the content type of a request that speaks gRPC (or
// gRPC-Web: web) with a codec the server has, tidied as connect-go tidies
// it (lower case, a lower-case charset); ok is false for any other, which
// connect-go answers itself.
func grpcContent(contentType string) (ct string, web, ok bool) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", false, false
	}
	if cs, has := params["charset"]; has {
		params["charset"] = strings.ToLower(cs)
	}
	ct = mime.FormatMediaType(mt, params)
	switch ct {
	case "application/grpc", "application/grpc+proto", "application/grpc+json", "application/grpc+json; charset=utf-8":
		return ct, false, true
	case "application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json", "application/grpc-web+json; charset=utf-8":
		return ct, true, true
	}
	return "", false, false
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
func writeGRPCError(w http.ResponseWriter, contentType string, web bool, message string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
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
