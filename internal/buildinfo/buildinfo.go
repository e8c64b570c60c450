// Package buildinfo tells which build of acp-gateway is running: its
// version, the revision it was built from, and its Go release. The
// version command, the acp_gateway_build_info metric, serve's start-up log
// and the editor bridge's clientInfo all report the same.
//
// A release build sets the version and revision at link time, as
// deploy/Dockerfile does (its build has no .git to read them from):
//
//	go build -ldflags "-X github.com/acp-gateway/acp-gateway/internal/buildinfo.version=v1.2.3 \
//	    -X github.com/acp-gateway/acp-gateway/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/acp-gateway
//
// Otherwise they come from what the Go toolchain recorded: the module
// version of a `go install ...@v1.2.3`, and the VCS revision of a
// `go build` in a git checkout.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Set with -ldflags -X by release builds; empty otherwise.
var version, revision string

// DevVersion and UnknownRevision stand for a version or a revision that
// the build did not record.
const (
	DevVersion      = "dev"
	UnknownRevision = "unknown"
)

// Info describes a build.
type Info struct {
	// Version is the release (v1.2.3), or DevVersion.
	Version string
	// Revision is the VCS revision built, or UnknownRevision.
	Revision string
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// Get returns the running binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, version, revision)
}

// from makes the Info of a binary with build info bi (nil when it has
// none), whose link-time version and revision are linkVersion and
// linkRevision (empty when not set). The link-time values win.
func from(bi *debug.BuildInfo, linkVersion, linkRevision string) Info {
	info := Info{Version: DevVersion, Revision: UnknownRevision, GoVersion: "unknown"}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		// "(devel)" is what a build from a checkout records.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if linkVersion != "" {
		info.Version = linkVersion
	}
	if linkRevision != "" {
		info.Revision, info.Modified = linkRevision, false
	}
	return info
}

// String is the one line `acp-gateway version` prints.
func (i Info) String() string {
	rev := i.Revision
	if i.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("acp-gateway %s (revision %s) %s", i.Version, rev, i.GoVersion)
}
