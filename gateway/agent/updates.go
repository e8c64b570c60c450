package agent

import "sync"

// maxQueuedUpdates bounds the updates decoded and not yet handed to the
// Client: the read loop waits beyond it, and the agent's output with it.
const maxQueuedUpdates = 256

// updateQueue hands the updates the read loop decodes to the Client, in
// order, on a goroutine of its own: the agent's next lines are decoded
// while the Client merges and stores the last ones, which took each
// update's whole time in turn in the read loop. The Client gets all the
// updates queued while it handled the last batch at once, so that under
// load it stores many with one write. The goroutine runs while
// there are updates to hand over, so an idle agent has none. The read
// loop drains the queue before it handles any other message (a response,
// a request) and before the output's end, so the Client sees everything
// in the order the agent sent it.
type updateQueue struct {
	client Client

	mu      sync.Mutex
	changed sync.Cond // signalled when pending shrinks or running stops
	queued  []Update
	spare   []Update // the last batch handed over, emptied, for reuse
	// pending counts the updates pushed and not yet handed over: those
	// queued and those of the batch being handed over.
	pending int
	running bool
}

func newUpdateQueue(c Client) *updateQueue {
	q := &updateQueue{client: c}
	q.changed.L = &q.mu
	return q
}

// push queues an update, waiting while the queue is full.
func (q *updateQueue) push(u Update) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.pending >= maxQueuedUpdates {
		q.changed.Wait()
	}
	q.queued = append(q.queued, u)
	q.pending++
	if !q.running {
		q.running = true
		go q.run()
	}
}

// run hands the queued updates to the Client until none are left.
func (q *updateQueue) run() {
	q.mu.Lock()
	for len(q.queued) > 0 {
		batch := q.queued
		q.queued, q.spare = q.spare[:0], nil
		q.mu.Unlock()
		q.client.SessionUpdates(batch)
		clear(batch)
		q.mu.Lock()
		q.pending -= len(batch)
		q.changed.Broadcast()
		q.spare = batch
	}
	// An idle agent keeps no batch: let go of the arrays.
	q.queued, q.spare = nil, nil
	q.running = false
	q.changed.Broadcast()
	q.mu.Unlock()
}

// drain waits until every queued update has been handed to the Client.
func (q *updateQueue) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.running {
		q.changed.Wait()
	}
}
