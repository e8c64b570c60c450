package service

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/session"
)

// TestErrorsSayTheirCodeOnce checks that a session error whose text
// begins with its code's words does not repeat them after the code the
// client prints (`invalid_argument: invalid argument: ...`), and that the
// error still is what it was.
func TestErrorsSayTheirCodeOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: cwd must be absolute", session.ErrInvalid), "invalid_argument: cwd must be absolute"},
		{fmt.Errorf("%w: the session's working directory: gone", session.ErrPermission), "permission_denied: the session's working directory: gone"},
		// Not the code's words: kept whole.
		{session.ErrNotFound, "not_found: session not found"},
		{fmt.Errorf("%w: x", session.ErrBusy), "failed_precondition: a turn is already running in this session: x"},
		// Nothing but the code's words: kept.
		{session.ErrInvalid, "invalid_argument: invalid argument"},
	}
	for _, tt := range tests {
		err := toConnect(tt.err)
		if err.Error() != tt.want {
			t.Errorf("toConnect(%q) = %q, want %q", tt.err, err, tt.want)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("toConnect(%q) is no longer the error it was", tt.err)
		}
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Errorf("toConnect(%q) is not a Connect error", tt.err)
		}
	}
}
