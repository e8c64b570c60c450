package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/acp-gateway/acp-gateway/gateway/server"
)

// The stages deploy/Dockerfile must have, in order; the last is the
// default target.
var wantStages = []string{"build", "agents", "gateway-node", "gateway"}

// image is what the test reads of one of the Dockerfile's runnable stages.
type image struct {
	stage      string
	uid, gid   int
	entrypoint []string
	cmd        []string
	expose     []int
}

// dockerfile is deploy/Dockerfile parsed.
type dockerfile struct {
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parsing deploy/Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		t.Errorf("deploy/Dockerfile:%d: parser warning: %s", line, w.Short)
	}
	var lint []string
	l := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		lint = append(lint, fmt.Sprintf("deploy/Dockerfile:%d: %s: %s", line, rule, msg))
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, l)
	if err != nil {
		t.Fatalf("deploy/Dockerfile: %v", err)
	}
	for _, w := range lint {
		t.Errorf("lint: %s", w)
	}
	return dockerfile{stages: stages, metaArgs: metaArgs}
}

func (d dockerfile) stage(t *testing.T, name string) instructions.Stage {
	t.Helper()
	for _, s := range d.stages {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("deploy/Dockerfile has no stage %q", name)
	return instructions.Stage{}
}

func (d dockerfile) metaArg(name string) (string, bool) {
	for _, a := range d.metaArgs {
		for _, kv := range a.Args {
			if kv.Key == name && kv.Value != nil {
				return *kv.Value, true
			}
		}
	}
	return "", false
}

// readImage reads the user, entrypoint, command and exposed ports of a stage.
func readImage(t *testing.T, s instructions.Stage) image {
	t.Helper()
	im := image{stage: s.Name, uid: -1, gid: -1}
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			u, g, ok := strings.Cut(c.User, ":")
			uid, err1 := strconv.Atoi(u)
			gid, err2 := strconv.Atoi(g)
			if !ok || err1 != nil || err2 != nil {
				t.Errorf("stage %s: USER %s: want numeric UID:GID, so that Kubernetes's runAsNonRoot can verify it", s.Name, c.User)
				continue
			}
			im.uid, im.gid = uid, gid
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("stage %s: ENTRYPOINT in shell form: want the exec form, so that the gateway gets SIGTERM", s.Name)
			}
			im.entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			if c.PrependShell {
				t.Errorf("stage %s: CMD in shell form: want the exec form", s.Name)
			}
			im.cmd = c.CmdLine
		case *instructions.ExposeCommand:
			for _, p := range c.Ports {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("stage %s: EXPOSE %s: want a TCP port number", s.Name, p)
					continue
				}
				im.expose = append(im.expose, n)
			}
		}
	}
	if im.uid <= 0 {
		t.Errorf("stage %s: want USER with a numeric non-root UID, got UID %d", s.Name, im.uid)
	}
	return im
}

// copies returns the COPY instructions of a stage.
func copies(s instructions.Stage) []*instructions.CopyCommand {
	var cs []*instructions.CopyCommand
	for _, c := range s.Commands {
		if c, ok := c.(*instructions.CopyCommand); ok {
			cs = append(cs, c)
		}
	}
	return cs
}

// runs returns the command lines of a stage's RUN instructions, joined.
func runs(s instructions.Stage) []string {
	var rs []string
	for _, c := range s.Commands {
		if c, ok := c.(*instructions.RunCommand); ok {
			rs = append(rs, strings.Join(c.CmdLine, " "))
		}
	}
	return rs
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	var names []string
	for _, s := range d.stages {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, wantStages) {
		t.Fatalf("stages %q, want %q (the last is the default target)", names, wantStages)
	}

	// build: the Go toolchain go.mod asks for, and a static binary.
	build := d.stage(t, "build")
	goVersion, ok := d.metaArg("GO_VERSION")
	if !ok {
		t.Fatal("no ARG GO_VERSION before the first FROM")
	}
	gomod, err := os.ReadFile(repo("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || goVersion != string(m[1]) {
		t.Errorf("ARG GO_VERSION=%s, want %s, the Go release go.mod names", goVersion, m[1])
	}
	if !strings.HasPrefix(build.BaseName, "golang:${GO_VERSION}") {
		t.Errorf("build stage FROM %s, want golang:${GO_VERSION}...", build.BaseName)
	}
	static := false
	for _, c := range build.Commands {
		if e, ok := c.(*instructions.EnvCommand); ok {
			for _, kv := range e.Env {
				static = static || (kv.Key == "CGO_ENABLED" && kv.Value == "0")
			}
		}
	}
	var binary string
	for _, r := range runs(build) {
		static = static || strings.Contains(r, "CGO_ENABLED=0")
		if strings.Contains(r, "go build") && strings.Contains(r, "./cmd/acp-gateway") {
			if m := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(r); m != nil {
				binary = m[1]
			}
		}
	}
	if !static {
		t.Error("build stage: want CGO_ENABLED=0 (a static binary, which needs no library of the runtime images)")
	}
	if binary == "" {
		t.Fatal("build stage: no RUN go build -o PATH ./cmd/acp-gateway")
	}

	// The two runnable images.
	listenPort := portOf(t, "server.DefaultListen", server.DefaultListen)
	flags := knownServeFlags(t)
	bin := gatewayBinary(t)
	for _, name := range []string{"gateway", "gateway-node"} {
		s := d.stage(t, name)
		im := readImage(t, s)
		switch name {
		case "gateway":
			// Debian, for its bubblewrap package; the release the build
			// and node stages are on.
			if s.BaseName != "debian:bookworm-slim" && s.BaseName != "debian:12-slim" {
				t.Errorf("stage gateway FROM %s, want debian:bookworm-slim (bubblewrap is a Debian package)", s.BaseName)
			}
		case "gateway-node":
			if !strings.HasPrefix(s.BaseName, "node:") {
				t.Errorf("stage gateway-node FROM %s, want node:", s.BaseName)
			}
		}
		if im.uid != 65532 || im.gid != 65532 {
			t.Errorf("stage %s: USER %d:%d, want 65532:65532 (nonroot, which deploy/k8s runs as)", name, im.uid, im.gid)
		}
		checkSandboxPackages(t, s, im)
		// The binary comes from the build stage, to where ENTRYPOINT runs it.
		var copied string
		for _, c := range copies(s) {
			if c.From == "build" && slices.Equal(c.SourcePaths, []string{binary}) {
				copied = c.DestPath
			}
		}
		if copied == "" {
			t.Errorf("stage %s: no COPY --from=build %s", name, binary)
		}
		if len(im.entrypoint) != 1 || im.entrypoint[0] != copied {
			t.Errorf("stage %s: ENTRYPOINT %q, want [%q]", name, im.entrypoint, copied)
		}
		if len(im.cmd) == 0 || im.cmd[0] != "serve" {
			t.Fatalf("stage %s: CMD %q, want serve and its flags", name, im.cmd)
		}
		values, err := parseServeArgs(flags, im.cmd[1:])
		if err != nil {
			t.Fatalf("stage %s: CMD: %v", name, err)
		}
		listen, _ := last(values, "listen")
		if host, _, _ := strings.Cut(listen, ":"); host != "0.0.0.0" {
			t.Errorf("stage %s: CMD --listen %q: want 0.0.0.0, reachable from outside the container", name, listen)
		}
		if p := portOf(t, "CMD --listen", listen); p != listenPort {
			t.Errorf("stage %s: CMD --listen port %d, want the default port %d", name, p, listenPort)
		}
		// serve refuses to listen beyond loopback without authentication
		// unless told --insecure-no-auth.
		_, auth := last(values, "auth-tokens")
		if insecure, _ := last(values, "insecure-no-auth"); !auth && insecure != "true" {
			t.Errorf("stage %s: CMD listens on %s without --auth-tokens or --insecure-no-auth: serve refuses to start", name, listen)
		}
		if !slices.Equal(im.expose, []int{int(listenPort)}) {
			t.Errorf("stage %s: EXPOSE %v, want [%d]", name, im.expose, listenPort)
		}
		// The bolt store's directory and the working directory exist and
		// belong to the user.
		store, _ := last(values, "store")
		if !strings.HasPrefix(store, "bolt:/") {
			t.Errorf("stage %s: CMD --store %q: want bolt:/ABSOLUTE/PATH", name, store)
		}
		owned := map[string]bool{}
		for _, c := range copies(s) {
			if c.Chown == fmt.Sprintf("%d:%d", im.uid, im.gid) {
				owned[c.DestPath] = true
			}
		}
		if dir := path.Dir(strings.TrimPrefix(store, "bolt:")); !owned[dir] {
			t.Errorf("stage %s: the store's directory %s is not made with COPY --chown=%d:%d", name, dir, im.uid, im.gid)
		}
		workdir := ""
		for _, c := range s.Commands {
			if w, ok := c.(*instructions.WorkdirCommand); ok {
				workdir = w.Path
			}
		}
		if !owned[workdir] {
			t.Errorf("stage %s: WORKDIR %q is not made with COPY --chown=%d:%d", name, workdir, im.uid, im.gid)
		}
		// The real binary accepts the command line: each flag parses (the
		// agents' command lines split). --help stops it before it serves.
		out, err := exec.Command(bin, append(slices.Clone(im.cmd), "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("stage %s: acp-gateway %s --help: %v\n%s", name, strings.Join(im.cmd, " "), err, out)
		}
		if name == "gateway-node" {
			checkNodeAgents(t, d, values["agent"])
		}
	}
}

// runtimePackages are the Debian packages each runnable image installs:
// bubblewrap, which `serve` runs every agent in when it authenticates its
// clients (--sandbox bwrap, deploy/README.md "Agents and the sandbox"), and
// the CA certificates of the gateway's own TLS clients (OIDC, OTLP,
// rediss://).
var runtimePackages = []string{"bubblewrap", "ca-certificates"}

// setuid matches a chmod that sets the setuid or setgid bit.
var setuid = regexp.MustCompile(`chmod\s+(-\S+\s+)*(\S*[ugo]*\+[rwx]*s|[0-7]?[2-7][0-7]{3}\b)`)

// checkSandboxPackages checks that a runnable stage installs
// runtimePackages with apt-get, as root (before its USER), without the
// recommended extras and without leaving apt's lists behind; that it makes
// its user's passwd entry; and that nothing in it makes a file setuid or
// setgid: bubblewrap runs unprivileged, in user namespaces, and the
// Kubernetes pod forbids privilege escalation.
func checkSandboxPackages(t *testing.T, s instructions.Stage, im image) {
	t.Helper()
	installed := map[string]bool{}
	user := false // a USER instruction came before
	madeUser := false
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = true
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			if setuid.MatchString(line) {
				t.Errorf("stage %s: RUN %q makes a file setuid or setgid", s.Name, line)
			}
			if strings.Contains(line, fmt.Sprintf("useradd --uid %d --gid %d", im.uid, im.gid)) {
				madeUser = true
			}
			if !strings.Contains(line, "apt-get install") {
				continue
			}
			if user {
				t.Errorf("stage %s: RUN apt-get install after USER: it runs as root, before it", s.Name)
			}
			if !strings.Contains(line, "--no-install-recommends") || !strings.Contains(line, "rm -rf /var/lib/apt/lists/*") {
				t.Errorf("stage %s: RUN %q: want apt-get install --no-install-recommends, and apt's lists removed after it", s.Name, line)
			}
			for _, w := range strings.Fields(line) {
				installed[w] = true
			}
		}
	}
	for _, p := range runtimePackages {
		if !installed[p] {
			t.Errorf("stage %s: does not apt-get install %s", s.Name, p)
		}
	}
	if !madeUser {
		t.Errorf("stage %s: no RUN useradd --uid %d --gid %d: the user needs a passwd entry", s.Name, im.uid, im.gid)
	}
}

// checkNodeAgents checks that the npm agents the gateway-node image names
// are installed by its agents stage from deploy/agents.
func checkNodeAgents(t *testing.T, d dockerfile, agents []string) {
	t.Helper()
	agentsStage := d.stage(t, "agents")
	var installDir string
	for _, c := range agentsStage.Commands {
		if w, ok := c.(*instructions.WorkdirCommand); ok {
			installDir = w.Path
		}
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	for file, v := range map[string]any{"package.json": &pkg, "package-lock.json": &lock} {
		data, err := os.ReadFile(filepath.Join("agents", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("deploy/agents/%s: %v", file, err)
		}
	}
	for name, version := range pkg.Dependencies {
		if got := lock.Packages["node_modules/"+name].Version; got != version {
			t.Errorf("deploy/agents: %s %s in package.json, %q in package-lock.json: run npm install --package-lock-only --prefix deploy/agents", name, version, got)
		}
	}
	copiedTo := ""
	for _, c := range copies(d.stage(t, "gateway-node")) {
		if c.From == "agents" {
			copiedTo = c.DestPath
			if !slices.Equal(c.SourcePaths, []string{installDir}) || c.DestPath != installDir {
				t.Errorf("gateway-node: COPY --from=agents %q %s, want %s to %s", c.SourcePaths, c.DestPath, installDir, installDir)
			}
		}
	}
	if copiedTo == "" {
		t.Error("gateway-node: no COPY --from=agents")
	}
	npmAgents := 0
	for _, a := range agents {
		_, cmdline, _ := strings.Cut(a, "=")
		words := strings.Fields(cmdline)
		if words[0] != "node" {
			continue
		}
		npmAgents++
		rel, ok := strings.CutPrefix(words[1], installDir+"/node_modules/")
		if !ok {
			t.Errorf("gateway-node: agent %q runs a script outside %s/node_modules", a, installDir)
			continue
		}
		parts := strings.SplitN(rel, "/", 3)
		name := parts[0]
		if strings.HasPrefix(name, "@") && len(parts) > 1 {
			name += "/" + parts[1]
		}
		if _, ok := pkg.Dependencies[name]; !ok {
			t.Errorf("gateway-node: agent %q runs package %s, which deploy/agents/package.json does not install", a, name)
		}
	}
	if npmAgents == 0 {
		t.Error("gateway-node: CMD names no npm agent (--agent NAME=node /opt/agents/...)")
	}
}

// TestDockerignore checks that .dockerignore lets through every file the
// image's build reads (the Go packages of the binary, embedded files
// included, and the Dockerfile's COPY sources) and keeps out the rest.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(repo(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(p string) bool {
		ex, err := pm.MatchesOrParentMatches(filepath.ToSlash(p))
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}

	need := []string{"go.mod", "go.sum"}
	d := parseDockerfile(t)
	for _, s := range d.stages {
		for _, c := range copies(s) {
			if c.From != "" {
				continue
			}
			for _, src := range c.SourcePaths {
				if _, err := os.Stat(repo(src)); err != nil {
					t.Errorf("stage %s: COPY %s: %v", s.Name, src, err)
				}
				need = append(need, src)
			}
		}
	}
	// Every file of the binary's packages in this module, for any GOARCH.
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,GoFiles,IgnoredGoFiles,EmbedFiles,Module", "./cmd/acp-gateway")
	cmd.Dir = repo()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repo())
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir                                 string
			GoFiles, IgnoredGoFiles, EmbedFiles []string
			Module                              *struct{ Main bool }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range [][]string{p.GoFiles, p.IgnoredGoFiles, p.EmbedFiles} {
			for _, f := range files {
				// IgnoredGoFiles lists test files another GOOS builds
				// (limits_other_test.go): no build reads a test file.
				if !strings.HasSuffix(f, "_test.go") {
					need = append(need, filepath.Join(rel, f))
				}
			}
		}
	}
	if len(need) < 50 {
		t.Fatalf("only %d files needed? %q", len(need), need)
	}
	for _, p := range need {
		if excluded(p) {
			t.Errorf(".dockerignore excludes %s, which the image's build needs", p)
		}
	}
	for _, p := range []string{".git/HEAD", "web/console/node_modules/esbuild/package.json", "integration/node/node_modules/x",
		"gateway/session/session_test.go", "docs/screenshots/console-turn.png", "deploy/k8s/base/deployment.yaml", "acp-gateway", "README.md"} {
		if !excluded(p) {
			t.Errorf(".dockerignore lets %s into the build context, which the build does not need", p)
		}
	}
}

// The image's build stamps the VERSION and REVISION build arguments into
// the binary: built with the Dockerfile's own -X flags (their ${...}
// given values here), `acp-gateway version` reports them. A renamed
// package or a mistyped flag would otherwise leave every image reporting
// dev and unknown.
func TestDockerfileStampsTheBuild(t *testing.T) {
	d := parseDockerfile(t)
	build := d.stage(t, "build")
	args := map[string]string{}
	for _, c := range build.Commands {
		if a, ok := c.(*instructions.ArgCommand); ok {
			for _, kv := range a.Args {
				if kv.Value != nil {
					args[kv.Key] = *kv.Value
				}
			}
		}
	}
	// Empty by default: internal/buildinfo then reports what an unstamped
	// build does, and the Dockerfile need not repeat its words.
	if v, r := args["VERSION"], args["REVISION"]; v != "" || r != "" {
		t.Errorf("build stage: ARG VERSION=%q, REVISION=%q; want both empty, so that buildinfo's own defaults apply", v, r)
	}
	var stamps []string
	for _, r := range runs(build) {
		if strings.Contains(r, "go build") && strings.Contains(r, "./cmd/acp-gateway") {
			for _, m := range regexp.MustCompile(`-X\s+([^\s"=]+)=([^\s"]+)`).FindAllStringSubmatch(r, -1) {
				v := strings.NewReplacer("${VERSION}", "v9.8.7-test", "${REVISION}", "0123abcd").Replace(m[2])
				stamps = append(stamps, "-X", m[1]+"="+v)
			}
		}
	}
	if len(stamps) != 4 {
		t.Fatalf("build stage: the go build's -ldflags set %q, want the version and the revision", stamps)
	}
	bin := filepath.Join(t.TempDir(), "acp-gateway")
	cmd := exec.Command("go", "build", "-ldflags", strings.Join(stamps, " "), "-o", bin, "./cmd/acp-gateway")
	cmd.Dir = repo()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with the Dockerfile's -ldflags: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if want := "acp-gateway v9.8.7-test (revision 0123abcd) go"; err != nil || !strings.HasPrefix(string(out), want) {
		t.Fatalf("acp-gateway version: %q (%v), want it to begin %q", out, err, want)
	}
}
