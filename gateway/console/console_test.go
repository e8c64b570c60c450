package console_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/console"
)

func get(t *testing.T, h http.Handler, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assets returns the asset paths index.html loads.
func assets(t *testing.T, index string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`(?:src|href)="(assets/[^"]+)"`).FindAllStringSubmatch(index, -1) {
		out = append(out, "/"+m[1])
	}
	if len(out) != 2 {
		t.Fatalf("index.html loads %v, want one script and one style sheet", out)
	}
	return out
}

func TestHandler(t *testing.T) {
	t.Parallel()
	h := console.Handler([]string{"zeta", "demo"})
	index := get(t, h, "GET", "/", nil)
	indexBody := body(t, index)

	t.Run("page", func(t *testing.T) {
		t.Parallel()
		if index.StatusCode != http.StatusOK || !strings.Contains(indexBody, "<title>acp-gateway console</title>") {
			t.Fatalf("GET / = %d %q", index.StatusCode, indexBody)
		}
		for k, want := range map[string]string{
			"Content-Type":            "text/html; charset=utf-8",
			"Cache-Control":           "no-cache",
			"Content-Security-Policy": console.CSP,
			"X-Content-Type-Options":  "nosniff",
		} {
			if got := index.Header.Get(k); got != want {
				t.Errorf("GET / %s = %q, want %q", k, got, want)
			}
		}
		if res := get(t, h, "GET", "/index.html", nil); body(t, res) != indexBody {
			t.Error("GET /index.html differs from GET /")
		}
	})

	t.Run("assets", func(t *testing.T) {
		t.Parallel()
		for _, p := range assets(t, indexBody) {
			res := get(t, h, "GET", p, nil)
			b := body(t, res)
			if res.StatusCode != http.StatusOK || len(b) == 0 {
				t.Fatalf("GET %s = %d, %d bytes", p, res.StatusCode, len(b))
			}
			if got := res.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
				t.Errorf("GET %s Cache-Control = %q", p, got)
			}
			wantType := map[bool]string{true: "text/javascript; charset=utf-8", false: "text/css; charset=utf-8"}[strings.HasSuffix(p, ".js")]
			if got := res.Header.Get("Content-Type"); got != wantType {
				t.Errorf("GET %s Content-Type = %q, want %q", p, got, wantType)
			}
			tag := res.Header.Get("ETag")
			if again := get(t, h, "GET", p, http.Header{"If-None-Match": {tag}}); tag == "" || again.StatusCode != http.StatusNotModified {
				t.Errorf("GET %s If-None-Match %s = %d, want 304", p, tag, again.StatusCode)
			}

			gz := get(t, h, "GET", p, http.Header{"Accept-Encoding": {"br, gzip"}})
			if gz.Header.Get("Content-Encoding") != "gzip" || gz.Header.Get("ETag") == tag {
				t.Fatalf("GET %s with gzip: Content-Encoding %q, ETag %q (plain %q)", p, gz.Header.Get("Content-Encoding"), gz.Header.Get("ETag"), tag)
			}
			zr, err := gzip.NewReader(gz.Body)
			if err != nil {
				t.Fatal(err)
			}
			if unzipped, _ := io.ReadAll(zr); !bytes.Equal(unzipped, []byte(b)) {
				t.Errorf("GET %s gzipped does not unzip to the asset", p)
			}
			if plain := get(t, h, "GET", p, http.Header{"Accept-Encoding": {"gzip;q=0"}}); plain.Header.Get("Content-Encoding") != "" {
				t.Errorf("GET %s with gzip;q=0 was gzipped", p)
			}
		}
	})

	t.Run("config", func(t *testing.T) {
		t.Parallel()
		res := get(t, h, "GET", console.ConfigPath, nil)
		var cfg struct{ Agents []string }
		if err := json.Unmarshal([]byte(body(t, res)), &cfg); err != nil {
			t.Fatal(err)
		}
		if strings.Join(cfg.Agents, ",") != "demo,zeta" || res.Header.Get("Content-Type") != "application/json" ||
			res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s = %+v, %v", console.ConfigPath, cfg, res.Header)
		}
		empty := body(t, get(t, console.Handler(nil), "GET", console.ConfigPath, nil))
		if empty != `{"agents":[]}` {
			t.Errorf("no agents: %s", empty)
		}
	})

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			method, target string
			code           int
		}{
			{"GET", "/nope", http.StatusNotFound},
			{"GET", "/assets/", http.StatusNotFound},
			{"GET", "/assets/../../console.go", http.StatusNotFound},
			{"GET", "/acp.v2.SessionService/Watch", http.StatusNotFound},
			{"POST", "/", http.StatusMethodNotAllowed},
			{"HEAD", "/", http.StatusOK},
		} {
			res := get(t, h, tc.method, tc.target, nil)
			if res.StatusCode != tc.code {
				t.Errorf("%s %s = %d, want %d", tc.method, tc.target, res.StatusCode, tc.code)
			}
			if res.Header.Get("Content-Security-Policy") != console.CSP {
				t.Errorf("%s %s has no CSP", tc.method, tc.target)
			}
		}
	})
}
