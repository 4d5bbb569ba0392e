package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// idleDeadLetters is a queue whose dead-letter queues are empty and hold each receive until
// together reads are in flight at once (or the receive's context ends): idle queues that keep a
// receive for its whole wait.
type idleDeadLetters struct {
	task.Queue
	together int

	mu       sync.Mutex
	inFlight int
	released chan struct{}
}

func (q *idleDeadLetters) ReceiveDead(ctx context.Context, _ task.ReceiveParams) ([]task.DeadLetter, error) {
	q.mu.Lock()
	q.inFlight++
	if q.inFlight == q.together {
		close(q.released)
	}
	q.mu.Unlock()
	select {
	case <-q.released:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *idleDeadLetters) DeleteDead(context.Context, task.Delivery) error { return nil }

// TestDrainReadsManyQueuesAtOnce: a drain reads the dead-letter queues of many lambdas at once,
// not a few at a time (the consumer's Workers): each idle queue holds its receive for DrainWait,
// and a drain of 100 lambdas of 3 priorities read 8 at a time would outlast its timeout, the
// queues read last never drained. Here 64 receives must be in flight together before any ends.
func TestDrainReadsManyQueuesAtOnce(t *testing.T) {
	q := &idleDeadLetters{together: 64, released: make(chan struct{})}
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("l%03d", i))
	}
	e := newEnvWith(t, options{wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, names...)
	// The bound only ends a drain that reads too few at once: it never gets 64 in flight.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := e.cons.Drain(ctx)
	if err != nil || st.Receives != 300 {
		t.Fatalf("drain of 300 idle queues: %+v, %v; want 300 receives, none failed (64 in flight together)", st, err)
	}
}

// cutDeadLetters is a queue whose dead-letter queues are empty and hold each receive until the
// drain is cut short: once cutAfter receives have begun, it ends the drain's context, as its
// bound would end a drain of more queues (or slower ones) than it can read in time. It records
// the queues a receive began on while the drain still ran.
type cutDeadLetters struct {
	task.Queue
	cutAfter int

	mu      sync.Mutex
	begun   int
	cut     context.CancelFunc // the current drain's
	reached map[string]bool
}

func (q *cutDeadLetters) ReceiveDead(ctx context.Context, p task.ReceiveParams) ([]task.DeadLetter, error) {
	q.mu.Lock()
	if ctx.Err() == nil {
		q.reached[p.Lambda+"/"+p.Priority] = true
		if q.begun++; q.begun == q.cutAfter {
			q.cut()
		}
	}
	q.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (q *cutDeadLetters) DeleteDead(context.Context, task.Delivery) error { return nil }

// TestDrainCutShortResumes: a drain that its bound cuts short leaves the queues it did not reach
// to the next drain, which starts with them: drain after drain, every dead-letter queue is read,
// not the first ones again and again while those read last never are. Here each drain of 300
// queues is cut after 100 receives began; three drains read all 300.
func TestDrainCutShortResumes(t *testing.T) {
	q := &cutDeadLetters{cutAfter: 100, reached: map[string]bool{}}
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("l%03d", i))
	}
	e := newEnvWith(t, options{wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, names...)
	for range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		q.mu.Lock()
		q.begun, q.cut = 0, cancel
		q.mu.Unlock()
		if _, err := e.cons.Drain(ctx); err == nil {
			t.Fatal("a drain cut short reported no error")
		}
		cancel()
	}
	if len(q.reached) != 300 {
		t.Errorf("3 drains, each cut after 100 receives, read %d of the 300 dead-letter queues; want all", len(q.reached))
	}
}

// oneDeadLetter is a queue whose dead-letter queue of lambda l holds one message, m, until it is
// deleted.
type oneDeadLetter struct {
	task.Queue
	mu      sync.Mutex
	m       *task.Message
	deleted bool
}

func (q *oneDeadLetter) ReceiveDead(_ context.Context, p task.ReceiveParams) ([]task.DeadLetter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil || q.deleted || p.Lambda != q.m.Lambda || p.Priority != q.m.Priority {
		return nil, nil
	}
	return []task.DeadLetter{{Delivery: task.Delivery{Message: *q.m, Receipt: "r", ReceiveCount: 11}}}, nil
}

func (q *oneDeadLetter) DeleteDead(context.Context, task.Delivery) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	return nil
}

// TestDrainBuriesMessageWithoutTask: a dead letter sent before its task was written, whose task is
// not there, is buried as its claim would have been, and deleted: the create, landing later,
// fails. One whose task is there is the task's: it is sent again.
func TestDrainBuriesMessageWithoutTask(t *testing.T) {
	q := &oneDeadLetter{}
	e := newEnvWith(t, options{wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, "l")
	tk, err := task.New(task.Spec{ID: "x"}, e.ls["l"], e.now, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ahead, m, err := task.EnqueueAhead(tk, e.now, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ahead, m = task.SendFirst(ahead, m)
	q.m = &m
	if st, err := e.cons.Drain(t.Context()); err != nil || st.Stale != 1 || !q.deleted {
		t.Fatalf("drain of a message of no task: %+v, %v, deleted %v; want it stale and deleted", st, err, q.deleted)
	}
	if err := e.store.Create(t.Context(), ahead); !errors.Is(err, task.ErrBuried) {
		t.Fatalf("the create after its dead letter was drained: %v, want ErrBuried", err)
	}

	ahead, m = task.SendFirst(ahead, m)
	if err := e.store.Create(t.Context(), ahead); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	q.m, q.deleted = &m, false
	q.mu.Unlock()
	if st, err := e.cons.Drain(t.Context()); err != nil || st.Resent != 1 {
		t.Fatalf("drain of a message of a task sent first: %+v, %v; want it sent again", st, err)
	}
}
