package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	checkout := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}
	for _, c := range []struct {
		name       string
		bi         *debug.BuildInfo
		lv, lr     string
		want       Info
		wantString string
	}{
		{"no build info", nil, "", "", Info{Version: "dev", Revision: "unknown", GoVersion: "unknown"},
			"acp-gateway dev (revision unknown) unknown"},
		{"a build in a checkout", checkout, "", "", Info{Version: "dev", Revision: "abc123", Modified: true, GoVersion: "go1.26.8"},
			"acp-gateway dev (revision abc123, modified) go1.26.8"},
		{"go install of a release", installed, "", "", Info{Version: "v1.2.3", Revision: "unknown", GoVersion: "go1.26.8"},
			"acp-gateway v1.2.3 (revision unknown) go1.26.8"},
		// The link-time values win, and a revision given there is a
		// release's, not a work tree's.
		{"a release build", checkout, "v2.0.0", "def456", Info{Version: "v2.0.0", Revision: "def456", GoVersion: "go1.26.8"},
			"acp-gateway v2.0.0 (revision def456) go1.26.8"},
		{"version only at link time", checkout, "v2.0.0", "", Info{Version: "v2.0.0", Revision: "abc123", Modified: true, GoVersion: "go1.26.8"},
			"acp-gateway v2.0.0 (revision abc123, modified) go1.26.8"},
	} {
		got := from(c.bi, c.lv, c.lr)
		if got != c.want || got.String() != c.wantString {
			t.Errorf("%s: %+v %q, want %+v %q", c.name, got, got, c.want, c.wantString)
		}
	}
}

// Get reads this binary's own build info: a test binary records its Go
// release, and no version.
func TestGet(t *testing.T) {
	got := Get()
	if got.GoVersion != runtime.Version() || got.Version != DevVersion || !strings.HasPrefix(got.String(), "acp-gateway dev ") {
		t.Fatalf("Get() = %+v", got)
	}
}
