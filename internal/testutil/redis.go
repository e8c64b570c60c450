package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server of a test's own, on a free loopback port,
// for fault tests to stop and start: it keeps its data in an append-only
// file synced at every write, so a restart finds everything it
// acknowledged, unless the test wipes it.
type RedisServer struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
	out  SyncBuffer // the server's output, shown when it fails to start
}

// StartRedis starts a redis-server of the test's own; it is killed when
// the test ends.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	Needs(t, "redis-server")
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("the fault tests run redis-server of their own: install it (Debian's redis-server; make deps does): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &RedisServer{t: t, port: port, dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// URL is the server's redis:// URL.
func (r *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// Start starts the server on its port, with the data it kept, and waits
// until it answers.
func (r *RedisServer) Start() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("redis-server is running already")
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	o, err := redis.ParseURL(r.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on port %d does not answer: %v\n%s", r.port, err, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server at once (SIGKILL), as a crash would; what it
// acknowledged is on disk.
func (r *RedisServer) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Wipe deletes the data the server kept; it must be stopped. It then
// starts empty, as a Redis without persistence does after a restart.
func (r *RedisServer) Wipe() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("wipe a running redis-server")
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(r.dir, e.Name())); err != nil {
			r.t.Fatal(err)
		}
	}
}
