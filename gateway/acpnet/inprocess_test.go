package acpnet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
)

func roundTrip(t *testing.T, h http.HandlerFunc, ctx context.Context) (*http.Response, *sync.WaitGroup, error) {
	t.Helper()
	var wg sync.WaitGroup
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://in-process/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := inProcess{h: h, wg: &wg}.RoundTrip(req)
	return res, &wg, err
}

// TestInProcessCarriesTheContext: the handler runs with the caller's
// context (the authenticated user) and its peer address.
func TestInProcessCarriesTheContext(t *testing.T) {
	ctx := withPeer(auth.WithUser(context.Background(), "alice"), "192.0.2.1:1234")
	res, wg, err := roundTrip(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User", auth.User(r.Context()))
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, r.RemoteAddr)
	}, ctx)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	wg.Wait()
	if res.StatusCode != http.StatusTeapot || res.Header.Get("X-User") != "alice" || string(body) != "192.0.2.1:1234" {
		t.Errorf("got %d, user %q, peer %q", res.StatusCode, res.Header.Get("X-User"), body)
	}
}

// TestInProcessPanicFailsTheCallOnly: a handler's panic is the call's
// error, as net/http makes it, not the process's end.
func TestInProcessPanicFailsTheCallOnly(t *testing.T) {
	res, wg, err := roundTrip(t, func(http.ResponseWriter, *http.Request) { panic("boom") }, context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	wg.Wait()
	if res.StatusCode != http.StatusInternalServerError || err == nil {
		t.Errorf("a panicking handler: %d, %v; want 500 and a failed body", res.StatusCode, err)
	}
}

// TestInProcessWriteDeadlineCutsAStuckCaller: the service's write timeout
// (http.ResponseController) ends a write that the caller does not read, at
// the deadline (on the fake clock of a synctest bubble).
func TestInProcessWriteDeadlineCutsAStuckCaller(t *testing.T) {
	synctest.Test(t, testInProcessWriteDeadlineCutsAStuckCaller)
}

func testInProcessWriteDeadlineCutsAStuckCaller(t *testing.T) {
	const timeout = time.Minute
	start := time.Now()
	wrote := make(chan error, 1)
	res, wg, err := roundTrip(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout)); err != nil {
			wrote <- err
			return
		}
		_, err := w.Write([]byte("nobody reads this"))
		wrote <- err
	}, context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Error("a write nobody read succeeded")
		}
		if waited := time.Since(start); waited != timeout {
			t.Errorf("the write ended after %v, want the deadline, %v", waited, timeout)
		}
	case <-time.After(2 * timeout):
		t.Fatal("the write deadline did not end the write")
	}
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	wg.Wait()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the caller read %v, want the deadline's error", err)
	}
}

// TestInProcessCancelledBeforeHeaders: a caller that gives up before the
// handler answers gets its context's error, and the handler ends.
func TestInProcessCancelledBeforeHeaders(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	res, wg, err := roundTrip(t, func(http.ResponseWriter, *http.Request) {
		cancel()
		<-release
	}, ctx)
	close(release)
	wg.Wait()
	if err == nil {
		res.Body.Close()
		t.Fatal("a cancelled call succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
