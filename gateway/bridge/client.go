package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// NewClient returns a SessionService client of the gateway at baseURL (such
// as "https://gateway.example.com") that sends token, when it is not empty,
// as `Authorization: Bearer TOKEN` on every call.
func NewClient(httpClient connect.HTTPClient, baseURL, token string, opts ...connect.ClientOption) acpv2connect.SessionServiceClient {
	if token != "" {
		opts = append([]connect.ClientOption{connect.WithInterceptors(bearer(token))}, opts...)
	}
	return acpv2connect.NewSessionServiceClient(httpClient, strings.TrimRight(baseURL, "/"), opts...)
}

// bearer adds a bearer token to every call a client makes.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// JSON-RPC error codes the bridge answers with (ACP's ErrorCode).
const (
	codeInvalidParams    = jsonrpc2.CodeInvalidParams  // -32602
	codeMethodNotFound   = jsonrpc2.CodeMethodNotFound // -32601
	codeInternal         = jsonrpc2.CodeInternalError  // -32603
	codeRequestCancelled = -32800
	codeNotFound         = -32002
)

// rpcError returns the JSON-RPC error for a failed gateway call op (such as
// "CreateSession"). Its message names the call, the Connect code and the
// gateway's message; its data carries the Connect code as "connectCode".
func rpcError(op string, err error) *jsonrpc2.Error {
	var rerr *jsonrpc2.Error
	if errors.As(err, &rerr) {
		return rerr
	}
	code := connect.CodeOf(err)
	msg := err.Error()
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		msg = cerr.Message()
	}
	var hint string
	rpcCode := int64(codeInternal)
	switch code {
	case connect.CodeInvalidArgument:
		rpcCode = codeInvalidParams
	case connect.CodeNotFound:
		rpcCode = codeNotFound
	case connect.CodeCanceled:
		rpcCode = codeRequestCancelled
	case connect.CodeUnauthenticated:
		hint = "; check the token given to `acp-gateway connect` (--token, --token-file or ACP_GATEWAY_TOKEN)"
	case connect.CodePermissionDenied:
		hint = "; the gateway's token does not allow this"
	case connect.CodeUnavailable:
		hint = "; is the gateway running and its URL right?"
	}
	e := &jsonrpc2.Error{
		Code:    rpcCode,
		Message: fmt.Sprintf("acp-gateway %s failed: %s: %s%s", op, code, msg, hint),
	}
	e.SetError(map[string]string{"connectCode": code.String()})
	return e
}

// invalidParams returns a JSON-RPC invalid-params error.
func invalidParams(format string, args ...any) *jsonrpc2.Error {
	return &jsonrpc2.Error{Code: codeInvalidParams, Message: fmt.Sprintf(format, args...)}
}
