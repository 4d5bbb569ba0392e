// Package memqueue is the in-process task.Queue of `atf dev`. It behaves like an SQS standard
// queue: one queue per (lambda, priority), created on first use; a sent message may be delayed;
// a received message is hidden for its visibility timeout and comes back, with a higher receive
// count and a fresh receipt, unless it is deleted first; Receive can long-poll.
//
// Like an SQS fair queue, a queue is shared fairly among the keys of its messages (task.Message
// Key; messages without one are one key of their own): Receive serves the keys that have visible
// messages round-robin, each key's oldest first, so one key's backlog does not hold up the others.
//
// Messages live in memory only and die with the process. That is on purpose: the store is the
// source of truth and a message carries nothing but a task id. A task whose message is lost stays
// enqueued (or claimed) in the store until its timeout, and then the consumer sends it again;
// consumer.Recover makes that immediate after a restart.
package memqueue

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Limits and defaults, the same as SQS.
const (
	// MaxReceive is the most messages one Receive returns.
	MaxReceive = 10
	// DefaultVisibility hides received messages when ReceiveParams.Visibility is zero.
	DefaultVisibility = 30 * time.Second
)

var _ task.Queue = (*Queue)(nil)

// Queue holds every (lambda, priority) queue of one process. It is safe for concurrent use.
type Queue struct {
	mu       sync.Mutex
	seq      uint64 // the last message's entry.seq
	queues   map[key]*queue
	lambdas  map[string]*wakes // the wake of every lambda's queues, all priorities together
	receipts map[string]*entry // the current receipt of every received, undeleted message
}

// wakes is a channel closed, and replaced, to wake those waiting on it.
type wakes struct{ ch chan struct{} }

func (w *wakes) signal() {
	close(w.ch)
	w.ch = make(chan struct{})
}

type key struct{ lambda, priority string }

// queue is one (lambda, priority) queue: its messages by key, each key a lane. A lane with
// messages is either in ready, the round-robin of the lanes whose first message was visible when
// they joined it (checked again when their turn comes), or in waiting, by when its first message
// becomes visible. So a receive costs a few heap steps per message it takes, whatever the backlog.
type queue struct {
	lanes   map[string]*lane
	ready   []*lane
	waiting laneHeap
	// wake is closed, and replaced, whenever a message may have become visible sooner than a
	// waiting Receive planned for; so is lambda's, the wake of the lambda's every priority.
	wake   chan struct{}
	lambda *wakes
}

type entry struct {
	id        string       // Delivery.ID, the same at every receive
	msg       task.Message // Delay is zero
	visibleAt time.Time
	receipt   string
	count     int
	seq       uint64 // send order, so that of messages visible at once the older is received first
	lane      *lane
	index     int // in lane.entries
}

// lane holds the messages of one key of a queue.
type lane struct {
	key     string
	entries entryHeap // by visibleAt, then send order: the first is visible if any is
	ready   bool      // in queue.ready
	index   int       // in queue.waiting, or -1
}

func (l *lane) first() *entry { return l.entries[0] }

// New returns an empty queue set.
func New() *Queue {
	return &Queue{queues: map[key]*queue{}, lambdas: map[string]*wakes{}, receipts: map[string]*entry{}}
}

// queue returns the queue of k, creating it. The caller holds mu.
func (q *Queue) queue(k key) *queue {
	qu := q.queues[k]
	if qu == nil {
		lw := q.lambdas[k.lambda]
		if lw == nil {
			lw = &wakes{ch: make(chan struct{})}
			q.lambdas[k.lambda] = lw
		}
		qu = &queue{lanes: map[string]*lane{}, wake: make(chan struct{}), lambda: lw}
		q.queues[k] = qu
	}
	return qu
}

// signal wakes the Receives waiting on qu. The caller holds mu.
func (qu *queue) signal() {
	close(qu.wake)
	qu.wake = make(chan struct{})
	qu.lambda.signal()
}

// Send puts msgs on their queues. Either all are sent or, if one is invalid, none.
func (q *Queue) Send(ctx context.Context, msgs ...task.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Lambda == "" || m.Priority == "" || m.TaskID == "" {
			return task.Errorf(task.ErrInvalid, "message needs a lambda, a priority and a task id")
		}
		if m.Delay < 0 {
			return task.Errorf(task.ErrInvalid, "message delay must not be negative, got %s", m.Delay)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		q.seq++
		e := &entry{id: rand.Text(), msg: m, visibleAt: now.Add(m.Delay), seq: q.seq}
		e.msg.Delay = 0
		qu := q.queue(key{m.Lambda, m.Priority})
		l := qu.lanes[m.Key]
		if l == nil {
			l = &lane{key: m.Key, index: -1}
			qu.lanes[m.Key] = l
		}
		e.lane = l
		heap.Push(&l.entries, e)
		qu.changed(l)
		qu.signal()
	}
	return nil
}

// Receive takes up to p.Max (1 if zero, at most MaxReceive) visible messages, one key after the
// other round-robin and each key's oldest first, and hides them for p.Visibility (DefaultVisibility if zero). If none is visible it waits up to
// p.Wait for one. A wait that ends empty returns no messages and no error; one that ctx ends
// returns ctx's error.
//
// A wait also ends, empty, once a message of another priority of the same lambda is visible: a
// controller long-polls its highest priority when idle, and a task of a lower one must not wait
// out the poll (on SQS, where one poll watches one queue, it does: up to the controller's
// IdleWait).
func (q *Queue) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	if p.Lambda == "" || p.Priority == "" {
		return nil, task.Errorf(task.ErrInvalid, "receive needs a lambda and a priority")
	}
	if p.Max < 0 || p.Max > MaxReceive {
		return nil, task.Errorf(task.ErrInvalid, "receive max must be in 0..%d, got %d", MaxReceive, p.Max)
	}
	if p.Wait < 0 || p.Visibility < 0 {
		return nil, task.Errorf(task.ErrInvalid, "receive wait and visibility must not be negative")
	}
	if p.Max == 0 {
		p.Max = 1
	}
	if p.Visibility == 0 {
		p.Visibility = DefaultVisibility
	}
	k := key{p.Lambda, p.Priority}
	deadline := time.Now().Add(p.Wait)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		q.mu.Lock()
		now := time.Now()
		qu := q.queue(k)
		ds, next := q.take(qu, now, p)
		wake, others := qu.wake, qu.lambda.ch
		var otherVisible bool
		if len(ds) == 0 && now.Before(deadline) {
			var otherNext time.Time
			otherVisible, otherNext = q.visibleBeside(k, now)
			if next.IsZero() || !otherNext.IsZero() && otherNext.Before(next) {
				next = otherNext
			}
		}
		q.mu.Unlock()
		if len(ds) > 0 {
			return ds, nil
		}
		if otherVisible || !now.Before(deadline) {
			return nil, nil
		}
		// Sleep until a Send or an Extend on any of the lambda's queues, the first hidden
		// message's return, the deadline, or the end of ctx, whichever comes first.
		until := deadline
		if !next.IsZero() && next.Before(until) {
			until = next
		}
		if timer == nil {
			timer = time.NewTimer(until.Sub(now))
		} else {
			timer.Reset(until.Sub(now))
		}
		select {
		case <-wake:
		case <-others:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// visibleBeside reports whether a message of another priority of k's lambda is visible at now,
// and else the earliest time one becomes visible, or zero. The caller holds mu.
func (q *Queue) visibleBeside(k key, now time.Time) (bool, time.Time) {
	var next time.Time
	for ok, qu := range q.queues {
		if ok.lambda != k.lambda || ok.priority == k.priority {
			continue
		}
		visible, at := qu.visible(now)
		if visible {
			return true, time.Time{}
		}
		if next.IsZero() || !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	return false, next
}

// take hides and returns up to p.Max messages of qu visible at now, a lane's first at each turn
// of the round-robin. If there are none it returns the earliest time a hidden one becomes
// visible, or zero. The caller holds mu.
func (q *Queue) take(qu *queue, now time.Time, p task.ReceiveParams) ([]task.Delivery, time.Time) {
	var ds []task.Delivery
	for len(ds) < p.Max {
		if visible, _ := qu.visible(now); !visible {
			break
		}
		l := qu.ready[0]
		qu.ready = qu.ready[1:]
		l.ready = false
		e := l.first()
		delete(q.receipts, e.receipt)
		e.receipt = rand.Text()
		e.count++
		e.visibleAt = now.Add(p.Visibility)
		heap.Fix(&l.entries, e.index)
		q.receipts[e.receipt] = e
		ds = append(ds, task.Delivery{Message: e.msg, ID: e.id, Receipt: e.receipt, ReceiveCount: e.count})
		qu.place(l, now) // at the back of the round-robin, if it has another visible message
	}
	if len(ds) > 0 {
		return ds, time.Time{}
	}
	_, next := qu.visible(now)
	return nil, next
}

// visible reports whether qu has a message visible at now, and else the earliest time one
// becomes visible, or zero. On true, qu.ready[0] has one first. The caller holds mu.
func (qu *queue) visible(now time.Time) (bool, time.Time) {
	for len(qu.waiting) > 0 && !qu.waiting[0].first().visibleAt.After(now) {
		l := heap.Pop(&qu.waiting).(*lane)
		l.ready = true
		qu.ready = append(qu.ready, l)
	}
	// A ready lane may have changed since it joined (a delete, an extend): check it now.
	for len(qu.ready) > 0 {
		l := qu.ready[0]
		if len(l.entries) > 0 && !l.first().visibleAt.After(now) {
			return true, time.Time{}
		}
		qu.ready = qu.ready[1:]
		l.ready = false
		qu.place(l, now)
	}
	if len(qu.waiting) > 0 {
		return false, qu.waiting[0].first().visibleAt
	}
	return false, time.Time{}
}

// place puts l, in neither ready nor waiting, where its first message says: at the back of
// ready, in waiting, or, empty, nowhere. The caller holds mu.
func (qu *queue) place(l *lane, now time.Time) {
	switch {
	case len(l.entries) == 0:
		delete(qu.lanes, l.key)
	case !l.first().visibleAt.After(now):
		l.ready = true
		qu.ready = append(qu.ready, l)
	default:
		heap.Push(&qu.waiting, l)
	}
}

// changed keeps l's place right after its messages changed. A ready lane keeps its turn: it is
// checked when the turn comes. The caller holds mu.
func (qu *queue) changed(l *lane) {
	switch {
	case l.ready:
	case len(l.entries) == 0:
		if l.index >= 0 {
			heap.Remove(&qu.waiting, l.index)
		}
		delete(qu.lanes, l.key)
	case l.index >= 0:
		heap.Fix(&qu.waiting, l.index)
	default:
		heap.Push(&qu.waiting, l)
	}
}

// entryHeap orders a lane's messages by when they are visible, then by send order.
type entryHeap []*entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if c := h[i].visibleAt.Compare(h[j].visibleAt); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// laneHeap orders the waiting lanes by when their first message is visible.
type laneHeap []*lane

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	a, b := h[i].first(), h[j].first()
	if c := a.visibleAt.Compare(b.visibleAt); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}
func (h laneHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}

// find returns the message that d's receipt currently names, or nil. The caller holds mu.
func (q *Queue) find(d task.Delivery) *entry {
	e := q.receipts[d.Receipt]
	if e == nil || e.msg.Lambda != d.Lambda || e.msg.Priority != d.Priority {
		return nil
	}
	return e
}

// Delete removes the message that d received. Like SQS, a receipt that is unknown or stale (the
// message was deleted, or received again since) is not an error: nothing happens.
func (q *Queue) Delete(ctx context.Context, d task.Delivery) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.find(d)
	if e == nil {
		return nil
	}
	delete(q.receipts, e.receipt)
	heap.Remove(&e.lane.entries, e.index)
	q.queues[key{d.Lambda, d.Priority}].changed(e.lane)
	return nil
}

// Extend hides the message that d received for visibility from now; zero makes it visible at
// once. Like SQS it fails with ErrNotFound if the receipt is unknown or stale, or if the message
// is no longer hidden (its visibility ran out).
func (q *Queue) Extend(ctx context.Context, d task.Delivery, visibility time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if visibility < 0 {
		return task.Errorf(task.ErrInvalid, "visibility must not be negative, got %s", visibility)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.find(d)
	if e == nil {
		return task.Errorf(task.ErrNotFound, "message of task %s: receipt is unknown or stale", d.TaskID)
	}
	now := time.Now()
	if !e.visibleAt.After(now) {
		return task.Errorf(task.ErrNotFound, "message of task %s is no longer hidden", d.TaskID)
	}
	e.visibleAt = now.Add(visibility)
	heap.Fix(&e.lane.entries, e.index)
	qu := q.queues[key{d.Lambda, d.Priority}]
	qu.changed(e.lane)
	// It may now be visible sooner than a waiting Receive planned for.
	qu.signal()
	return nil
}

// Size is what one (lambda, priority) queue holds, counted as SQS counts its approximate numbers.
type Size struct {
	Lambda, Priority string
	Visible          int // may be received now
	Delayed          int // sent with a delay not yet over, never received
	InFlight         int // received and hidden, not deleted yet
}

// Sizes returns the size of every queue used so far, for metrics (queue depth). It takes the
// queues' lock while it counts their messages: at most the lambdas' caps on enqueued tasks.
func (q *Queue) Sizes() []Size {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	out := make([]Size, 0, len(q.queues))
	for k, qu := range q.queues {
		s := Size{Lambda: k.lambda, Priority: k.priority}
		for _, l := range qu.lanes {
			for _, e := range l.entries {
				switch {
				case !e.visibleAt.After(now):
					s.Visible++
				case e.count == 0:
					s.Delayed++
				default:
					s.InFlight++
				}
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Size) int {
		return cmp.Or(strings.Compare(a.Lambda, b.Lambda), strings.Compare(a.Priority, b.Priority))
	})
	return out
}
