// Package queuetest is the conformance suite of task.Queue: every backend's tests call Exercise,
// so the in-process queue of `atf dev` and SQS behave alike.
//
// The suite keeps to what an SQS standard queue promises, so it also runs against SQS (or moto):
// delays and visibility timeouts are whole seconds, a Receive asks for at most 10 messages,
// expectations are sets of task ids rather than orders, a Receive may return fewer messages than
// are visible, and "nothing is visible" is only concluded from a long poll that came back empty.
// Every subtest uses lambda names of its own and runs in parallel with the others.
package queuetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Factory returns the queue for one subtest. It is told every lambda the subtest will use, with
// its priorities, so a backend can create their queues first. The caller cleans up, for example
// in t.Cleanup.
type Factory = func(t *testing.T, lambdas ...task.Lambda) task.Queue

// Exercise runs the suite.
func Exercise(t *testing.T, newQueue Factory) {
	cases := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"RoundTrip", testRoundTrip},
		{"SeparateQueues", testSeparateQueues},
		{"MaxAndExactlyOnce", testMaxAndExactlyOnce},
		{"VisibilityTimeout", testVisibilityTimeout},
		{"Delete", testDelete},
		{"Extend", testExtend},
		{"Delay", testDelay},
		{"WaitEmpty", testWaitEmpty},
		{"WaitWakesOnSend", testWaitWakesOnSend},
		{"CancelEndsWait", testCancelEndsWait},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newQueue)
		})
	}
}

const (
	// hidden is a visibility timeout that outlasts every subtest: a message received with it
	// never comes back while the test looks.
	hidden = time.Minute
	// poll is the long-poll wait of receives that expect messages, and of the receives that
	// conclude a queue has nothing visible.
	poll = time.Second
	// slack is how much earlier than promised a backend may let a delayed or hidden message
	// reappear (clock granularity, clocks of two machines).
	slack = 250 * time.Millisecond
	// patience bounds how long the suite waits for a message that should be visible.
	patience = 5 * time.Second
)

// newLambda returns a lambda with priorities high and low whose name no other subtest uses.
func newLambda() task.Lambda {
	return task.Lambda{Name: "qt-" + strings.ToLower(rand.Text()[:10]), Priorities: []string{"high", "low"}}.WithDefaults()
}

func msg(l task.Lambda, priority, id string) task.Message {
	return task.Message{Lambda: l.Name, Priority: priority, TaskID: id, Attempt: 1}
}

func params(l task.Lambda, priority string, visibility time.Duration) task.ReceiveParams {
	return task.ReceiveParams{Lambda: l.Name, Priority: priority, Max: 10, Wait: poll, Visibility: visibility}
}

func send(t *testing.T, q task.Queue, msgs ...task.Message) {
	t.Helper()
	if err := q.Send(context.Background(), msgs...); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// receive receives once and checks what every delivery must satisfy.
func receive(t *testing.T, q task.Queue, p task.ReceiveParams) []task.Delivery {
	t.Helper()
	ds, err := q.Receive(context.Background(), p)
	if err != nil {
		t.Fatalf("receive from %s/%s: %v", p.Lambda, p.Priority, err)
	}
	if len(ds) > max(p.Max, 1) {
		t.Fatalf("receive with max %d returned %d messages", p.Max, len(ds))
	}
	for _, d := range ds {
		if d.Lambda != p.Lambda || d.Priority != p.Priority {
			t.Fatalf("receive from %s/%s returned task %s of %s/%s", p.Lambda, p.Priority, d.TaskID, d.Lambda, d.Priority)
		}
		if d.Receipt == "" {
			t.Fatalf("task %s delivered without a receipt", d.TaskID)
		}
		if d.ReceiveCount < 1 {
			t.Fatalf("task %s delivered with receive count %d", d.TaskID, d.ReceiveCount)
		}
	}
	return ds
}

// collect receives until it has at least n messages, failing after patience.
func collect(t *testing.T, q task.Queue, p task.ReceiveParams, n int) []task.Delivery {
	t.Helper()
	var all []task.Delivery
	for start := time.Now(); len(all) < n; {
		if time.Since(start) > patience {
			t.Fatalf("received %v from %s/%s within %s, want %d messages", ids(all), p.Lambda, p.Priority, patience, n)
		}
		all = append(all, receive(t, q, p)...)
	}
	return all
}

// expectEmpty long-polls the queues of ps for wait, all at once, and fails if anything is
// received.
func expectEmpty(t *testing.T, q task.Queue, wait time.Duration, why string, ps ...task.ReceiveParams) {
	t.Helper()
	type result struct {
		ds  []task.Delivery
		err error
	}
	results := make([]chan result, len(ps))
	for i, p := range ps {
		results[i] = make(chan result, 1)
		go func() {
			p.Wait = wait
			ds, err := q.Receive(context.Background(), p)
			results[i] <- result{ds, err}
		}()
	}
	for i, p := range ps {
		r := <-results[i]
		if r.err != nil {
			t.Fatalf("%s: receive from %s/%s: %v", why, p.Lambda, p.Priority, r.err)
		}
		if len(r.ds) > 0 {
			t.Fatalf("%s: received %v from %s/%s, want nothing", why, ids(r.ds), p.Lambda, p.Priority)
		}
	}
}

// ids returns the task ids of ds, sorted.
func ids(ds []task.Delivery) []string {
	var s []string
	for _, d := range ds {
		s = append(s, d.TaskID)
	}
	slices.Sort(s)
	return s
}

func expectIDs(t *testing.T, what string, ds []task.Delivery, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := ids(ds); !slices.Equal(got, want) {
		t.Fatalf("%s: received %v, want %v", what, got, want)
	}
}

func testRoundTrip(t *testing.T, newQueue Factory) {
	l := newLambda()
	q := newQueue(t, l)
	want := task.Message{Lambda: l.Name, Priority: "low", TaskID: "task-1", Attempt: 3}
	send(t, q, want)
	ds := collect(t, q, params(l, "low", hidden), 1)
	if len(ds) != 1 {
		t.Fatalf("received %v, want one message", ids(ds))
	}
	d := ds[0]
	if d.Lambda != want.Lambda || d.Priority != want.Priority || d.TaskID != want.TaskID || d.Attempt != want.Attempt {
		t.Fatalf("received %+v, want %+v", d.Message, want)
	}
	if d.ReceiveCount != 1 {
		t.Fatalf("first delivery has receive count %d, want 1", d.ReceiveCount)
	}
	if d.Receipt == "" {
		t.Fatal("delivery has no receipt")
	}
}

func testSeparateQueues(t *testing.T, newQueue Factory) {
	a, b := newLambda(), newLambda()
	q := newQueue(t, a, b)
	// One Send may mix queues.
	send(t, q, msg(a, "high", "a-high"), msg(a, "low", "a-low"), msg(b, "high", "b-high"))
	for _, c := range []struct {
		l        task.Lambda
		priority string
		want     string
	}{{a, "high", "a-high"}, {a, "low", "a-low"}, {b, "high", "b-high"}} {
		expectIDs(t, fmt.Sprintf("queue %s/%s", c.l.Name, c.priority), collect(t, q, params(c.l, c.priority, hidden), 1), c.want)
	}
	// Each queue had its one message only, and a queue nobody sent to has none.
	expectEmpty(t, q, poll, "after its own message",
		params(a, "high", hidden), params(a, "low", hidden), params(b, "high", hidden), params(b, "low", hidden))
}

func testMaxAndExactlyOnce(t *testing.T, newQueue Factory) {
	l := newLambda()
	q := newQueue(t, l)
	var msgs []task.Message
	want := map[string]bool{}
	for i := range 15 { // more than one SQS batch
		m := msg(l, "high", fmt.Sprintf("task-%02d", i))
		msgs = append(msgs, m)
		want[m.TaskID] = true
	}
	send(t, q, msgs...)

	p := params(l, "high", hidden)
	p.Max = 3
	first := collect(t, q, p, 1) // receive checks it returned at most 3
	p.Max = 1
	all := append(first, collect(t, q, p, 1)...)
	p.Max = 10
	all = append(all, collect(t, q, p, len(want)-len(all))...)
	seen := map[string]bool{}
	for _, d := range all {
		if seen[d.TaskID] {
			t.Fatalf("task %s received twice within its visibility timeout", d.TaskID)
		}
		seen[d.TaskID] = true
		if d.ReceiveCount != 1 {
			t.Fatalf("task %s: receive count %d on first delivery, want 1", d.TaskID, d.ReceiveCount)
		}
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("received %v, want %v", slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(want)))
	}
	expectEmpty(t, q, poll, "every message is hidden", p)
}

func testVisibilityTimeout(t *testing.T, newQueue Factory) {
	const visibility = 2 * time.Second
	l := newLambda()
	q := newQueue(t, l)
	send(t, q, msg(l, "high", "task-1"))
	start := time.Now() // before the message is hidden
	first := collect(t, q, params(l, "high", visibility), 1)
	expectEmpty(t, q, poll, "within its visibility timeout", params(l, "high", hidden))

	again := collect(t, q, params(l, "high", hidden), 1)
	if elapsed := time.Since(start); elapsed < visibility-slack {
		t.Fatalf("message came back after %s, within its visibility timeout of %s", elapsed, visibility)
	}
	expectIDs(t, "after the visibility timeout", again, "task-1")
	d := again[0]
	if d.ReceiveCount != 2 {
		t.Fatalf("second delivery has receive count %d, want 2", d.ReceiveCount)
	}
	// The message's id is its own, the same at every receive: a running task's lease timer is
	// known by it (task.Task.Message).
	if d.ID == "" || d.ID != first[0].ID {
		t.Fatalf("message ids of two receives: %q then %q; want the same, not empty", first[0].ID, d.ID)
	}
	if d.Attempt != 1 {
		t.Fatalf("second delivery has attempt %d, want 1 as sent", d.Attempt)
	}
	if d.Receipt == first[0].Receipt {
		t.Fatal("second delivery reuses the receipt of the first")
	}
}

func testDelete(t *testing.T, newQueue Factory) {
	const visibility = time.Second
	l := newLambda()
	q := newQueue(t, l)
	send(t, q, msg(l, "high", "task-1"), msg(l, "high", "task-2"))
	ds := collect(t, q, params(l, "high", visibility), 2)
	expectIDs(t, "before delete", ds, "task-1", "task-2")
	for _, d := range ds {
		if err := q.Delete(context.Background(), d); err != nil {
			t.Fatalf("delete %s: %v", d.TaskID, err)
		}
	}
	// Look for longer than the visibility timeout: deleted messages never come back.
	expectEmpty(t, q, visibility+time.Second, "after delete", params(l, "high", hidden))
}

func testExtend(t *testing.T, newQueue Factory) {
	const visibility, extended = time.Second, 3 * time.Second
	l := newLambda()
	q := newQueue(t, l)
	send(t, q, msg(l, "high", "task-1"))
	ds := collect(t, q, params(l, "high", visibility), 1)
	start := time.Now()
	if err := q.Extend(context.Background(), ds[0], extended); err != nil {
		t.Fatalf("extend: %v", err)
	}
	// Past the original visibility timeout, short of the extended one.
	expectEmpty(t, q, 2*time.Second, "after extend", params(l, "high", hidden))

	again := collect(t, q, params(l, "high", hidden), 1)
	if elapsed := time.Since(start); elapsed < extended-slack {
		t.Fatalf("message came back %s after it was extended by %s", elapsed, extended)
	}
	expectIDs(t, "after the extended visibility", again, "task-1")
	if again[0].ReceiveCount != 2 {
		t.Fatalf("second delivery has receive count %d, want 2", again[0].ReceiveCount)
	}
}

func testDelay(t *testing.T, newQueue Factory) {
	const delay = 2 * time.Second
	l := newLambda()
	q := newQueue(t, l)
	start := time.Now()
	delayed := msg(l, "high", "delayed")
	delayed.Delay = delay
	delayed.Attempt = 2
	send(t, q, delayed, msg(l, "high", "now"))
	// The delayed message does not hold back the other one.
	expectIDs(t, "before the delay", collect(t, q, params(l, "high", hidden), 1), "now")
	expectEmpty(t, q, poll, "before the delay", params(l, "high", hidden))

	ds := collect(t, q, params(l, "high", hidden), 1)
	if elapsed := time.Since(start); elapsed < delay-slack {
		t.Fatalf("delayed message received %s after it was sent, want after %s", elapsed, delay)
	}
	expectIDs(t, "after the delay", ds, "delayed")
	if d := ds[0]; d.ReceiveCount != 1 || d.Attempt != 2 {
		t.Fatalf("delayed message has receive count %d and attempt %d, want 1 and 2", d.ReceiveCount, d.Attempt)
	}
}

func testWaitEmpty(t *testing.T, newQueue Factory) {
	l := newLambda()
	q := newQueue(t, l)
	start := time.Now()
	ds, err := q.Receive(context.Background(), params(l, "high", hidden))
	elapsed := time.Since(start)
	if err != nil || len(ds) > 0 {
		t.Fatalf("receive from an empty queue: %v, %v; want nothing and no error", ids(ds), err)
	}
	if elapsed < poll-slack || elapsed > poll+3*time.Second {
		t.Fatalf("receive with wait %s on an empty queue returned after %s", poll, elapsed)
	}
}

func testWaitWakesOnSend(t *testing.T, newQueue Factory) {
	const wait, sendAfter = 5 * time.Second, 300 * time.Millisecond
	l := newLambda()
	q := newQueue(t, l)
	sent := make(chan error, 1)
	go func() {
		time.Sleep(sendAfter)
		sent <- q.Send(context.Background(), msg(l, "high", "task-1"))
	}()
	p := params(l, "high", hidden)
	p.Wait = wait
	start := time.Now()
	ds := receive(t, q, p)
	elapsed := time.Since(start)
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	expectIDs(t, "waiting receive", ds, "task-1")
	if elapsed > wait-2*time.Second {
		t.Fatalf("receive returned %s after it started, want soon after the send at %s", elapsed, sendAfter)
	}
}

func testCancelEndsWait(t *testing.T, newQueue Factory) {
	const wait, cancelAfter = 5 * time.Second, 300 * time.Millisecond
	l := newLambda()
	q := newQueue(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(cancelAfter, cancel)
	p := params(l, "high", hidden)
	p.Wait = wait
	start := time.Now()
	ds, err := q.Receive(ctx, p)
	elapsed := time.Since(start)
	if len(ds) > 0 {
		t.Fatalf("cancelled receive returned %v", ids(ds))
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled receive returned error %v, want one matching context.Canceled", err)
	}
	if elapsed > wait-2*time.Second {
		t.Fatalf("receive returned %s after it started, want soon after the cancel at %s", elapsed, cancelAfter)
	}
}
