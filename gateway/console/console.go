// Package console serves acp-gateway's web console: a single-page app that
// lists sessions, creates them, sends prompts and renders each turn live
// (messages, thoughts, the plan, tool-call cards with diffs, permission
// requests), talking to the SessionService of the same origin with Connect.
//
// The app's source is web/console; its build (npm run build there) writes
// dist/, which is committed and embedded here.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed all:dist
var dist embed.FS

// ConfigPath is where the handler serves the console's configuration, a
// JSON object {"agents": [NAME, ...]}. There is no RPC listing agents, so
// the page fills its agent choice from here.
const ConfigPath = "/console/config.json"

// CSP is the Content-Security-Policy of every response: the page runs only
// its own script and style, and talks only to its own origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Cache-Control values: the page and the configuration are revalidated on
// every load; assets whose name carries a content hash never change.
const (
	cacheRevalidate = "no-cache"
	cacheImmutable  = "public, max-age=31536000, immutable"
)

// hashed matches the asset names esbuild gives with "[name]-[hash]".
var hashed = regexp.MustCompile(`-[A-Z0-9]{8}\.[a-z]+$`)

// file is one response body, ready to serve.
type file struct {
	body, gz []byte // gz is body gzipped, when that is smaller
	etag     string
	cache    string
}

// newFile prepares body for serving, gzipped too when that saves much.
func newFile(body []byte, cache string) file {
	f := file{body: body, etag: etag(body), cache: cache}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	_, _ = zw.Write(body)
	_ = zw.Close()
	if b.Len() < len(body)*9/10 {
		f.gz = b.Bytes()
	}
	return f
}

// Handler returns the console, to be mounted at the root of the gateway's
// mux with the pattern "/" (not "GET /", which conflicts with the
// method-less SessionService pattern). It serves the page at "/", its assets
// under "/assets/", and [ConfigPath] listing agents; anything else is 404,
// and methods other than GET and HEAD are 405.
func Handler(agents []string) http.Handler {
	files := maps.Clone(embedded())
	names := slices.Clone(agents)
	if names == nil {
		names = []string{}
	}
	slices.Sort(names)
	cfg, _ := json.Marshal(struct {
		Agents []string `json:"agents"`
	}{names})
	files[ConfigPath] = newFile(cfg, cacheRevalidate)
	return &handler{files: files}
}

// embedded reads the built assets once.
var embedded = sync.OnceValue(func() map[string]file {
	files := map[string]file{}
	err := fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "dist")
		cache := cacheRevalidate
		if hashed.MatchString(name) {
			cache = cacheImmutable
		}
		files[name] = newFile(b, cache)
		return nil
	})
	if err != nil {
		panic("console: reading the embedded assets: " + err.Error())
	}
	if _, ok := files["/index.html"]; !ok {
		panic("console: the embedded assets have no index.html: run 'npm run build' in web/console")
	}
	return files
})

// handler serves the embedded files and the configuration.
type handler struct {
	files map[string]file
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := path.Clean("/" + r.URL.Path)
	if name == "/" {
		name = "/index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd.Set("Cache-Control", f.cache)
	if name == ConfigPath {
		hd.Set("Content-Type", "application/json")
	}
	body, tag := f.body, f.etag
	if f.gz != nil {
		hd.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			body, tag = f.gz, strings.TrimSuffix(f.etag, `"`)+`-gz"`
			hd.Set("Content-Encoding", "gzip")
		}
	}
	hd.Set("ETag", tag)
	// ServeContent answers If-None-Match with 304, HEAD and ranges, and
	// sets Content-Type from the name.
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
			if f, err := strconv.ParseFloat(q, 64); ok && err == nil && f == 0 {
				continue
			}
			return true
		}
	}
	return false
}

// etag is a strong entity tag of b's content.
func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`
}
