package testutil

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Recorder is an HTTP server that records every request it gets, and
// passes each on to an upstream server, when it has one, as a transparent
// proxy would: a stand-in for a listener of an attacker's, which sees what
// is sent to it and may relay it to a real server.
type Recorder struct {
	*httptest.Server

	mu       sync.Mutex
	requests []string
}

// NewRecorder starts a Recorder for the test's lifetime. Without an
// upstream (a base URL) it answers every request 200 with no body.
func NewRecorder(t testing.TB, upstream string) *Recorder {
	t.Helper()
	var proxy *httputil.ReverseProxy
	if upstream != "" {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		proxy = httputil.NewSingleHostReverseProxy(u)
		proxy.FlushInterval = -1 // streams as they come
	}
	rec := &Recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var dump bytes.Buffer
		dump.WriteString(r.Method + " " + r.URL.Path + "\n")
		_ = r.Header.Write(&dump)
		dump.Write(body)
		rec.mu.Lock()
		rec.requests = append(rec.requests, dump.String())
		rec.mu.Unlock()
		if proxy == nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

// Requests returns each request the Recorder got so far: its method and
// path on the first line, then its headers and body as sent.
func (r *Recorder) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}
