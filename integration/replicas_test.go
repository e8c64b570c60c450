// Several replicas of the real binary on one Redis, killed and restarted as
// in production.

package integration

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	trust "github.com/acp-gateway/acp-gateway/gateway/replica"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// redisURL is the Redis database the replica tests own: they empty it.
func redisURL(t *testing.T) string {
	u := os.Getenv("ACP_GATEWAY_TEST_REDIS_REPLICAS")
	if u == "" {
		u = "redis://127.0.0.1:6379/10"
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s (start it with scripts/deps.sh): %v", u, err)
	}
	return u
}

type replica struct {
	name   string
	cmd    *exec.Cmd
	base   string
	client acpv2connect.SessionServiceClient
}

// startReplica runs `acp-gateway serve` on a loopback port.
func startReplica(t *testing.T, name string, args ...string) *replica {
	t.Helper()
	binary, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, cmd: cmd}
	t.Cleanup(func() { r.kill() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var l struct{ Msg, Addr string }
		if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "serving" {
			r.base = "http://" + l.Addr
			break
		}
	}
	if r.base == "" {
		t.Fatalf("replica %s did not start", name)
	}
	go io.Copy(io.Discard, out)
	r.client = acpv2connect.NewSessionServiceClient(http.DefaultClient, r.base, connect.WithProtoJSON())
	return r
}

// kill ends the replica with SIGKILL, as a crash would: it gets no chance
// to hand anything over.
func (r *replica) kill() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		_ = r.cmd.Wait()
	}
}

func text(s string) []*acpv2.ContentBlock {
	return []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}}
}

// promptThrough runs a demo turn through r, answering its permission
// requests through answer, and returns the turn's events.
func promptThrough(t *testing.T, r *replica, answer *replica, id string) []*acpv2.SessionEvent {
	t.Helper()
	events, err := turnThrough(r, answer, id)
	if err != nil {
		t.Fatalf("the turn through %s: %v", r.name, err)
	}
	return events
}

// turnThrough is promptThrough, returning its error.
func turnThrough(r *replica, answer *replica, id string) ([]*acpv2.SessionEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var answerErr error
	events, err := testutil.Turn(ctx, r.client, &acpv2.PromptRequest{SessionId: id, Prompt: text("go")}, func(ev *acpv2.SessionEvent) {
		if p := ev.GetPermissionRequest(); p != nil && answerErr == nil {
			_, answerErr = answer.client.RespondPermission(ctx, connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: id, RequestId: p.GetRequestId(), OptionId: p.GetOptions()[0].GetOptionId()}))
			if answerErr != nil {
				answerErr = fmt.Errorf("RespondPermission through %s: %w", answer.name, answerErr)
				cancel()
			}
		}
	})
	return events, cmp.Or(answerErr, err)
}

// watcher collects a Watch stream's events in the background.
type watcher struct {
	events chan *acpv2.SessionEvent
	errc   chan error
}

func watch(t *testing.T, r *replica, id string, after uint64) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := r.client.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: after}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &watcher{events: make(chan *acpv2.SessionEvent, 1024), errc: make(chan error, 1)}
	go func() {
		for stream.Receive() {
			if ev := stream.Msg().GetEvent(); ev != nil {
				w.events <- ev
			}
		}
		w.errc <- stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		stream.Close()
	})
	return w
}

// next returns the watcher's next n events.
func (w *watcher) next(t *testing.T, n int) []*acpv2.SessionEvent {
	t.Helper()
	var out []*acpv2.SessionEvent
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case ev := <-w.events:
			out = append(out, ev)
		case err := <-w.errc:
			t.Fatalf("the watch ended after %d of %d events: %v", len(out), n, err)
		case <-timeout:
			t.Fatalf("the watch got %d of %d events", len(out), n)
		}
	}
	return out
}

func snapshot(t *testing.T, r *replica, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := r.client.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatalf("GetSession on %s: %v", r.name, err)
	}
	return res.Msg.GetSession()
}

func equalEvents(a, b []*acpv2.SessionEvent) bool {
	return slices.EqualFunc(a, b, func(x, y *acpv2.SessionEvent) bool { return proto.Equal(x, y) })
}

// replicaSecret writes a new replica secret file and returns its path.
func replicaSecret(t *testing.T) string {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(t.TempDir(), "replica-secret")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// as makes r's client send token.
func (r *replica) as(token string) *replica {
	r.client = acpv2connect.NewSessionServiceClient(&http.Client{Transport: bearer{token, http.DefaultTransport}}, r.base, connect.WithProtoJSON())
	return r
}

func TestTwoReplicasOnOneRedis(t *testing.T) {
	store := redisURL(t)
	args := []string{"--store", store, "--lease-ttl", "1500ms", "--replica-secret-file", replicaSecret(t)}
	a := startReplica(t, "A", args...)
	b := startReplica(t, "B", args...)
	ctx := context.Background()

	created, err := a.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetSessionId()
	w := watch(t, b, id, 0)

	// Prompt and RespondPermission through B reach the agent on A.
	first := promptThrough(t, b, b, id)
	if !slices.ContainsFunc(first, func(ev *acpv2.SessionEvent) bool { return ev.GetPermissionResolved() != nil }) {
		t.Fatal("the permission request answered through B was not resolved")
	}
	// A watch on B sees every event of the turn, in order.
	if seen := w.next(t, len(first)); !equalEvents(seen, first) {
		t.Fatal("the watch on B differs from the turn's events")
	}
	// GetSession agrees on both replicas.
	sa, sb := snapshot(t, a, id), snapshot(t, b, id)
	if !proto.Equal(sa, sb) || sa.GetLastSeq() != first[len(first)-1].GetSeq() || len(sa.GetToolCalls()) == 0 {
		t.Fatalf("GetSession disagrees:\nA %v\nB %v", sa, sb)
	}

	// A dies. B keeps serving the session's state, and the watch on B
	// goes on without a gap: first the agent's loss, once A's lease lapses.
	a.kill()
	if sb := snapshot(t, b, id); !slices.EqualFunc(sb.GetToolCalls(), sa.GetToolCalls(), func(x, y *acpv2.ToolCall) bool { return proto.Equal(x, y) }) {
		t.Fatal("B's snapshot changed when A died")
	}
	lost := w.next(t, 1)[0]
	if lost.GetSeq() != sa.GetLastSeq()+1 || lost.GetStateChanged().GetState() != "agent_lost" {
		t.Fatalf("after A died the watch got %v, want the agent's loss at seq %d", lost, sa.GetLastSeq()+1)
	}
	// The next prompt on B takes the session over and re-attaches a new
	// agent with session/resume; the watcher sees that turn too.
	second := promptThrough(t, b, b, id)
	seen := w.next(t, len(second)+1)
	if seen[0].GetStateChanged().GetState() != "ready" || !equalEvents(seen[1:], second) {
		t.Fatalf("the watch on B after the take-over: %v", seen[0])
	}
	if got := snapshot(t, b, id); got.GetState() != "ready" || got.GetLastSeq() != second[len(second)-1].GetSeq() {
		t.Fatalf("after the take-over: state %q last seq %d", got.GetState(), got.GetLastSeq())
	}
}

// A replica that froze (SIGSTOP: its kernel still accepts connections, but
// it answers nothing and renews no lease) is treated as a dead one: what
// is forwarded to it ends unavailable, asking to retry, rather than
// waiting for ever, and once its lease lapses a retry is served by the
// replica that takes its session over.
func TestFrozenOwner(t *testing.T) {
	store := redisURL(t)
	args := []string{"--store", store, "--lease-ttl", "6s", "--forward-timeout", "1s"}
	a := startReplica(t, "A", args...)
	b := startReplica(t, "B", args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := a.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetSessionId()

	// A turn through B waits for its permission to be answered when A
	// freezes.
	stream, err := b.client.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: text("go")}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	asked := false
	for !asked && stream.Receive() {
		asked = stream.Msg().GetEvent().GetPermissionRequest() != nil
	}
	if !asked {
		t.Fatalf("the turn through B ended before its permission request: %v", stream.Err())
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Before the kill that startReplica's clean-up sends.
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	// A new prompt through B, sent while A's lease lasts, is answered
	// unavailable; so is the turn that A froze in.
	fresh := make(chan error, 1)
	go func() { fresh <- promptErr(b, id) }()
	for stream.Receive() {
	}
	for what, err := range map[string]error{"the turn A froze in": stream.Err(), "a new prompt": <-fresh} {
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "retry") {
			t.Errorf("%s, through B: %v; want unavailable, saying to retry", what, err)
		}
	}
	// B answers GetSession from the store meanwhile.
	if got := snapshot(t, b, id); got.GetLastSeq() == 0 {
		t.Errorf("GetSession through B: %v", got)
	}

	// Once A's lease lapses, B takes the session over: a retry goes
	// through, with a new agent.
	for {
		events, err := turnThrough(b, b, id)
		if err == nil {
			if reason := events[len(events)-1].GetTurnEnded().GetStopReason(); reason != "end_turn" {
				t.Fatalf("the turn through B after the take-over ended %q", reason)
			}
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			t.Fatalf("a retry through B: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promptErr runs a prompt through r and returns its error.
func promptErr(r *replica, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := r.client.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: text("the secret plan")}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

// With authentication, replicas forward only to peers that prove the
// replica secret, and carry the user, not the user's token: a lease forged
// in Redis gets its listener nothing, and a replica without the secret is
// no peer.
func TestReplicasTrustEachOtherNotTheStore(t *testing.T) {
	store := redisURL(t)
	const token = "tok-alice-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--store", store, "--auth-tokens", tokens, "--any-cwd", "--sandbox", "none"}
	secret := replicaSecret(t)
	a := startReplica(t, "A", append(common, "--replica-secret-file", secret)...).as(token)
	b := startReplica(t, "B", append(common, "--replica-secret-file", secret)...).as(token)
	c := startReplica(t, "C", append(common, "--insecure-forwarding")...).as(token)
	ctx := context.Background()
	create := func(r *replica) string {
		res, err := r.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: t.TempDir()}))
		if err != nil {
			t.Fatalf("CreateSession on %s: %v", r.name, err)
		}
		return res.Msg.GetSessionId()
	}

	// A turn through B of a session on A.
	id := create(a)
	if events := promptThrough(t, b, b, id); events[len(events)-1].GetTurnEnded().GetStopReason() != "end_turn" {
		t.Fatal("the turn through B did not end")
	}

	// C, without the secret: A does not forward to it, and refuses what
	// it forwards.
	if err := promptErr(a, create(c)); connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("a prompt through A of a session on C: %v, want internal", err)
	}
	if err := promptErr(c, id); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a prompt through C of a session on A: %v, want unauthenticated", err)
	}

	// A lease forged to name a listener that passes everything on to A.
	listener := testutil.NewRecorder(t, a.base)
	o, err := redis.ParseURL(store)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	if err := rdb.Set(ctx, "acpgw:s:{"+id+"}:lease", listener.URL, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := promptErr(b, id); connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("a prompt through B with a forged lease: %v, want internal", err)
	}
	got := listener.Requests()
	if len(got) == 0 {
		t.Fatal("the listener was not even asked to prove the secret")
	}
	for _, req := range got {
		if !strings.HasPrefix(req, "POST "+trust.ProofPath+"\n") || strings.Contains(req, token) || strings.Contains(req, "secret plan") {
			t.Errorf("the listener got more than a challenge:\n%s", req)
		}
	}
}
