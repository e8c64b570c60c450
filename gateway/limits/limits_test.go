package limits

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// start runs script with /bin/sh -c, in a new session of its own, placed in
// a new group of c before it runs anything (it waits on its stdin for the
// word to go).
func start(t *testing.T, c *Controller, script string) (*Group, *exec.Cmd, *output) {
	t.Helper()
	g, err := c.New(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	cmd := exec.Command("/bin/sh", "-c", "read -r _ || exit 1\n"+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := &output{f.Name()}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return g, cmd, out
}

// output is what a started script printed, in a file: its children
// inherit the file, not a pipe that would keep a copying goroutine alive.
type output struct{ path string }

func (o *output) String() string {
	b, _ := os.ReadFile(o.path)
	return string(b)
}

func TestPidsLimitBoundsTheTree(t *testing.T) {
	c, err := Setup(Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	// The shell gives up at the first fork the limit refuses.
	g, cmd, out := start(t, c, "for i in $(seq 60); do sleep 30 & done; echo started; wait")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the fork loop did not fail: %s", out)
	}
	if !strings.Contains(out.String(), "fork") {
		t.Errorf("no fork failed: %q", out)
	}
	pids, err := g.pids()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) < 10 || len(pids) > 16 {
		t.Errorf("the group holds %d processes, want 10 to 16", len(pids))
	}
	g.Close()
	if pids, err := g.pids(); err == nil && len(pids) > 0 {
		t.Errorf("%d processes outlived Close", len(pids))
	}
}

func TestMemoryLimitKillsTheWholeGroup(t *testing.T) {
	c, err := Setup(Limits{Memory: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// A sibling that stays small, and a tail that buffers 200 MB.
	g, cmd, _ := start(t, c, "setsid sleep 60 & head -c 200000000 /dev/zero | tail; wait")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the group was not killed")
	}
	if !g.OOMKilled() {
		t.Error("OOMKilled is false")
	}
	testutil.WaitFor(t, "every process of the group ends", func() bool {
		procs, err := g.pids()
		return err == nil && len(procs) == 0
	})
}

func TestCloseKillsProcessesThatLeftTheSession(t *testing.T) {
	c, err := Setup(Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	g, _, out := start(t, c, "setsid sh -c 'sleep 600' & echo $!; wait")
	testutil.WaitFor(t, "the child starts", func() bool { return strings.Contains(out.String(), "\n") })
	procs, err := g.pids()
	if err != nil || len(procs) < 2 {
		t.Fatalf("procs %v, %v", procs, err)
	}
	g.Close()
	for _, p := range procs {
		if syscall.Kill(p, 0) == nil {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !strings.Contains(string(st), ") Z ") {
				t.Errorf("process %d outlived Close", p)
			}
		}
	}
}

func TestResourceLimitsNeedNoCgroup(t *testing.T) {
	c, err := Setup(Limits{NoFile: 64, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.v2 != "" || len(c.v1) != 0 {
		t.Errorf("a cgroup is used for resource limits alone: %+v", c)
	}
	_, cmd, out := start(t, c, "ulimit -n; head -c 2000000 /dev/zero > "+t.TempDir()+"/big; echo status $?")
	_ = cmd.Wait()
	if got := out.String(); !strings.HasPrefix(got, "64\n") || strings.Contains(got, "status 0") {
		t.Errorf("got %q, want 64 open files and a write cut at 1 MiB", got)
	}
}

func TestDescribeAndResources(t *testing.T) {
	l := Limits{Memory: 4 << 30, Pids: 1024, CPU: 1.5, NoFile: 4096, FileSize: 512 << 20}
	if got := l.String(); got != "memory 4 GiB, 1024 processes, 1.5 CPU, 4096 open files, files up to 512 MiB" {
		t.Errorf("String: %q", got)
	}
	if got := (Limits{}).String(); got != "none" {
		t.Errorf("String of none: %q", got)
	}
	r := Limits{Memory: 1, CPU: 2}.Resources()
	if len(r) != 2 || r["memory_bytes"] != 1 || r["cpu"] != 2 {
		t.Errorf("Resources: %v", r)
	}
}
