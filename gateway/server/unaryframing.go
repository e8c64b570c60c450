package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"
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
		if !grpcContent(r.Header.Get("Content-Type")) || r.Method != http.MethodPost || serverStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, readMax+envelopeHeader+1))
		if ce := (*connect.Error)(nil); errors.As(err, &ce) {
			_ = errorWriter.Write(w, r, ce) // such as a body too slow
			return
		}
		if err != nil {
			invalidArgument(w, r, fmt.Sprintf("malformed request: reading the body: %v", err))
			return
		}
		if int64(len(body)) <= readMax+envelopeHeader {
			if msg := truncated(body); msg != "" {
				invalidArgument(w, r, "malformed request: protocol error: "+msg)
				return
			}
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		next.ServeHTTP(w, r)
	})
}

// envelopeHeader is the length of a message envelope's header: a flags
// byte and a 4-byte big-endian length.
const envelopeHeader = 5

// grpcContent reports whether a request of this content type speaks gRPC
// or gRPC-Web with a codec the server has, the type tidied as connect-go
// tidies it (lower case, a lower-case charset). connect-go answers any
// other itself.
func grpcContent(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	if cs, has := params["charset"]; has {
		params["charset"] = strings.ToLower(cs)
	}
	switch mime.FormatMediaType(mt, params) {
	case "application/grpc", "application/grpc+proto", "application/grpc+json", "application/grpc+json; charset=utf-8",
		"application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json", "application/grpc-web+json; charset=utf-8":
		return true
	}
	return false
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

// errorWriter writes an error as connect-go's handlers do, in the
// request's protocol.
var errorWriter = connect.NewErrorWriter()

// invalidArgument answers r with invalid_argument and message.
func invalidArgument(w http.ResponseWriter, r *http.Request, message string) {
	_ = errorWriter.Write(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New(message)))
}
