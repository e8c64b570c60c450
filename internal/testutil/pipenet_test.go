package testutil

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// A server on pipes answers HTTP/1.1 and h2c in a synctest bubble, where a
// response that waits an hour on the fake clock comes at once; once it is
// stopped, Accept ends and a dial is refused.
func TestServePipes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Hour)
			_, _ = io.WriteString(w, r.Proto)
		})}
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		l, base, stop := ServePipes(t, func(l net.Listener) error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, srv.Shutdown)
		if base != "http://localhost:80" {
			t.Errorf("base URL %q", base)
		}
		for h2c, want := range map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"} {
			start := time.Now()
			res, err := (&http.Client{Transport: l.Transport(t, h2c)}).Get(base)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || string(body) != want || time.Since(start) != time.Hour {
				t.Errorf("GET over %s: %q %v, after %v", want, body, err, time.Since(start))
			}
		}
		stop()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept on a closed listener: %v", err)
		}
		if _, err := l.DialContext(t.Context(), "tcp", base); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a dial to a closed listener: %v", err)
		}
	})
}
