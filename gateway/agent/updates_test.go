package agent

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// heldClient is a Client whose SessionUpdates waits for release, and which
// notes the updates' session ids in order.
type heldClient struct {
	release chan struct{}
	got     []string
	sizes   []int // of each call's batch
}

func (c *heldClient) SessionUpdates(updates []Update) {
	<-c.release
	c.sizes = append(c.sizes, len(updates))
	for _, u := range updates {
		c.got = append(c.got, u.AgentSessionID)
	}
}

func (*heldClient) RequestPermission(json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	return nil, func() {}, nil
}

func (*heldClient) Elicit(json.RawMessage) (<-chan *acpv2.ElicitationResolved, func(), error) {
	return nil, func() {}, nil
}

func (*heldClient) ElicitationComplete(json.RawMessage) {}

// While the Client takes its time, the read loop queues the next updates,
// up to the bound and not beyond; the Client then gets them all in order,
// those queued meanwhile in one call,
// and once they are handed over no goroutine is left running, and no
// batch's array kept.
func TestUpdatesQueueBesideTheReadLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &heldClient{release: make(chan struct{})}
		q := newUpdateQueue(c)
		const n = maxQueuedUpdates + 10
		pushed := make(chan int, 1)
		go func() {
			i := 0
			for ; i < n; i++ {
				q.push(Update{AgentSessionID: fmt.Sprint(i), Update: &acpv2.SessionUpdate{}})
			}
			pushed <- i
		}()
		synctest.Wait()
		// The first update is with the Client; the bound are waiting.
		q.mu.Lock()
		pending := q.pending
		q.mu.Unlock()
		if pending != maxQueuedUpdates {
			t.Fatalf("%d updates wait while the Client is busy, want the bound, %d", pending, maxQueuedUpdates)
		}
		select {
		case i := <-pushed:
			t.Fatalf("all %d updates were queued past the bound", i)
		default:
		}
		close(c.release)
		if i := <-pushed; i != n {
			t.Fatalf("%d pushed", i)
		}
		q.drain()
		if len(c.got) != n {
			t.Fatalf("the Client got %d updates, want %d", len(c.got), n)
		}
		for i, sid := range c.got {
			if sid != fmt.Sprint(i) {
				t.Fatalf("update %d is %s: out of order", i, sid)
			}
		}
		// What queued while the Client was busy with the first batch came
		// in the next call: together the two hold the bound. (How many the
		// first holds depends on when its goroutine started, and how the
		// last few pushed are split, on scheduling.)
		if len(c.sizes) < 2 || c.sizes[0]+c.sizes[1] < maxQueuedUpdates {
			t.Fatalf("batches of %v: the first two do not hold the %d that waited", c.sizes, maxQueuedUpdates)
		}
		synctest.Wait()
		q.mu.Lock()
		running, kept := q.running, cap(q.queued)+cap(q.spare)
		q.mu.Unlock()
		if running {
			t.Fatal("the queue's goroutine runs with nothing queued")
		}
		if kept != 0 {
			t.Fatalf("the idle queue keeps room for %d updates", kept)
		}
	})
}
