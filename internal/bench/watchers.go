package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// The fan-out phase's Watch streams run in a child process of their own,
// the child mode "watchers", at the lowest CPU priority (watchersNice).
// They stand in for clients on other machines: in the bench's own process
// at the agent's priority, decoding a thousand streams took more of the
// two CPUs than the gateway did, and slowed the agent by taking its CPU
// share rather than by anything the gateway did (docs/BENCHMARKS.md).
const watchersNice = 19

// watchersResult is what the watchers child reports once every stream
// saw the turn end.
type watchersResult struct {
	// Delivered counts the updates received, over every stream.
	Delivered int `json:"delivered"`
	CutOffs   int `json:"cutOffs"`
	// LastRecv is the last receive of any stream, Unix nanoseconds.
	LastRecv int64   `json:"lastRecv"`
	Latency  Latency `json:"latency"`
	// CPU is the child's CPU seconds from the streams being open to the
	// turn's end: what reading the events cost the clients, to set against
	// the gateway's CPU for sending them.
	CPU float64 `json:"cpuSeconds"`
	// Nice is the child's CPU priority (nice value) as it ran.
	Nice  int    `json:"nice"`
	Error string `json:"error,omitempty"`
}

// serveWatchers is the child mode "watchers": it lowers its CPU priority
// to watchersNice, opens --n Watch streams on session --session of the
// gateway at --base, prints "ready" once all are open, reads each until the
// turn ends, and prints its watchersResult as JSON.
func serveWatchers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench watchers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("run", "", "bench run id (marks the process)")
	base := fs.String("base", "", "the gateway's base URL")
	id := fs.String("session", "", "the session to watch")
	n := fs.Int("n", 1, "Watch streams")
	updates := fs.Int("updates", 0, "updates of the turn (sizes the latency samples)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *base == "" || *id == "" || *n < 1 {
		fmt.Fprintln(stderr, "bench watchers: --base, --session and --n (at least 1) are required")
		return 2
	}
	nice, err := lowerPriority(watchersNice)
	if err != nil {
		fmt.Fprintln(stderr, "bench watchers:", err)
		return 1
	}
	res := watch(ctx, *base, *id, *n, *updates, func() { fmt.Fprintln(stdout, "ready") })
	res.Nice = nice
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// lowerPriority sets the nice value of every thread of this process to
// nice and returns the value the threads have. Threads started later
// inherit it from the thread that starts them, so it repeats until a pass
// finds no thread it had not set.
func lowerPriority(nice int) (int, error) {
	done := map[int]bool{}
	for range 10 {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return 0, err
		}
		fresh := false
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				return 0, fmt.Errorf("setpriority: %w", err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return threadsNice()
		}
	}
	return 0, errors.New("setpriority: threads kept starting")
}

// threadsNice returns the nice value of this process's threads, or an
// error if they differ.
func threadsNice() (int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	var seen []int
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, ok := procfs.Stat(tid)
		if !ok {
			continue // the thread ended
		}
		v := t.Nice
		if !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	if len(seen) != 1 {
		return 0, fmt.Errorf("threads have nice values %v", seen)
	}
	return seen[0], nil
}

// watch opens n Watch streams (64 at a time) on session id, calls ready
// once all are open, and reads them until the turn ends.
func watch(ctx context.Context, base, id string, n, updates int, ready func()) watchersResult {
	var res watchersResult
	tr := newTransports()
	defer tr.close()
	c := tr.client(protoConnectIdentity, base, true)
	type watcher struct {
		stream *connect.ServerStreamForClient[acpv2.WatchResponse]
		stop   context.CancelFunc
		k      tracker
		err    error
	}
	ws := make([]*watcher, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = &watcher{}
		wg.Add(1)
		sem <- struct{}{}
		go func(wt *watcher) {
			defer wg.Done()
			defer func() { <-sem }()
			wctx, stop := context.WithCancel(ctx)
			// Watch returns once the gateway opened the stream with a
			// heartbeat: the watcher is registered.
			s, err := c.Watch(wctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
			if err != nil {
				stop()
				wt.err = err
				return
			}
			wt.stream, wt.stop = s, stop
		}(ws[i])
	}
	wg.Wait()
	for _, wt := range ws {
		if wt.err != nil {
			for _, o := range ws {
				if o.stop != nil {
					o.stop()
					_ = o.stream.Close()
				}
			}
			res.Error = "Watch: " + wt.err.Error()
			return res
		}
	}
	ready()
	cpu0 := selfCPU()
	for _, wt := range ws {
		wg.Add(1)
		go func(wt *watcher) {
			defer wg.Done()
			wt.k.r.Samples = make([]int64, 0, updates)
			wt.err = consume(ctx, c, id, wt.stream, wt.stop, &wt.k, nil)
		}(wt)
	}
	wg.Wait()
	res.CPU = (selfCPU() - cpu0).Seconds()
	var all []int64
	for _, wt := range ws {
		if wt.err != nil && res.Error == "" {
			res.Error = "Watch: " + wt.err.Error()
		}
		all = append(all, wt.k.r.Samples...)
		res.Delivered += wt.k.r.Updates
		res.CutOffs += wt.k.r.CutOffs
		res.LastRecv = max(res.LastRecv, wt.k.r.LastRecv)
	}
	res.Latency = latencyOf(all)
	return res
}

// watchersProc is a running watchers child.
type watchersProc struct{ *child }

// startWatchers starts a watchers child of n streams on session id of the
// gateway at base, and returns once all are open.
func startWatchers(ctx context.Context, self []string, runID, base, id string, n, updates int) (*watchersProc, error) {
	c, err := startChild(self, "watchers", runID, true, "--base", base, "--session", id, "--n", strconv.Itoa(n), "--updates", strconv.Itoa(updates))
	if err != nil {
		return nil, err
	}
	p := &watchersProc{c}
	line, err := lineWithin(ctx, p.out, 2*time.Minute)
	if strings.TrimSpace(line) == "ready" {
		return p, nil
	}
	p.kill()
	// Not ready: the child reports why as its result.
	var res watchersResult
	switch {
	case json.Unmarshal([]byte(line), &res) == nil && res.Error != "":
		return nil, errors.New(res.Error)
	case errors.Is(err, errNoLineInTime) || ctx.Err() != nil:
		return nil, errors.New("watchers did not open their streams in time")
	}
	return nil, fmt.Errorf("watchers did not start: %q %v %s", line, err, strings.TrimSpace(p.stderr.String()))
}

// wait returns the child's result once its streams saw the turn end, or
// kills it when ctx ends first (or the result takes five minutes).
func (p *watchersProc) wait(ctx context.Context) (watchersResult, error) {
	var res watchersResult
	err := p.result(ctx, 5*time.Minute, "watchers", &res)
	return res, err
}
