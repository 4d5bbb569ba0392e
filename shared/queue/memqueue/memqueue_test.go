package memqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/queue/queuetest"
	"github.com/openatf/atf/shared/task"
)

func TestConformance(t *testing.T) {
	queuetest.Exercise(t, func(t *testing.T, _ ...task.Lambda) task.Queue { return memqueue.New() })
}

var ctx = context.Background()

func params(max int) task.ReceiveParams {
	return task.ReceiveParams{Lambda: "l", Priority: "p", Max: max, Visibility: time.Minute}
}

func sendN(t *testing.T, q *memqueue.Queue, n int) {
	t.Helper()
	for i := range n {
		if err := q.Send(ctx, task.Message{Lambda: "l", Priority: "p", TaskID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func receive(t *testing.T, q *memqueue.Queue, p task.ReceiveParams) []task.Delivery {
	t.Helper()
	ds, err := q.Receive(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestReceiveOldestFirstAndMax(t *testing.T) {
	q := memqueue.New()
	sendN(t, q, 12)
	if _, err := q.Receive(ctx, params(11)); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("max 11: error %v, want ErrInvalid", err)
	}
	if ds := receive(t, q, params(0)); len(ds) != 1 || ds[0].TaskID != "0" {
		t.Fatalf("max 0 received %+v, want task 0 alone", ds)
	}
	ds := receive(t, q, params(10))
	if len(ds) != 10 {
		t.Fatalf("max 10 received %d", len(ds))
	}
	for i, d := range ds {
		if want := fmt.Sprint(i + 1); d.TaskID != want {
			t.Fatalf("delivery %d is task %s, want %s", i, d.TaskID, want)
		}
	}
}

func TestReceiptsAndErrors(t *testing.T) {
	q := memqueue.New()
	sendN(t, q, 1)
	p := params(1)
	p.Visibility = 20 * time.Millisecond
	first := receive(t, q, p)[0]
	time.Sleep(30 * time.Millisecond)
	if err := q.Extend(ctx, first, time.Minute); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("extend of a message no longer hidden: %v, want ErrNotFound", err)
	}
	second := receive(t, q, params(1))[0]

	// The first receipt is stale now: delete ignores it, extend refuses it.
	if err := q.Delete(ctx, first); err != nil {
		t.Fatalf("delete with a stale receipt: %v, want nil", err)
	}
	if err := q.Extend(ctx, first, time.Minute); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("extend with a stale receipt: %v, want ErrNotFound", err)
	}
	if err := q.Extend(ctx, second, time.Minute); err != nil {
		t.Fatalf("extend with the current receipt: %v", err)
	}
	if err := q.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, second); err != nil {
		t.Fatalf("second delete: %v, want nil", err)
	}
	unknown := task.Delivery{Message: task.Message{Lambda: "l", Priority: "p", TaskID: "x"}, Receipt: "nope"}
	if err := q.Extend(ctx, unknown, time.Minute); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("extend with an unknown receipt: %v, want ErrNotFound", err)
	}
	if err := q.Send(ctx, task.Message{Lambda: "l", Priority: "p"}); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("send without a task id: %v, want ErrInvalid", err)
	}
}

// A waiting Receive wakes when a hidden or delayed message becomes visible, without a Send.
func TestWaitWakesWhenVisible(t *testing.T) {
	q := memqueue.New()
	if err := q.Send(ctx, task.Message{Lambda: "l", Priority: "p", TaskID: "d", Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	p := params(1)
	p.Wait = 5 * time.Second
	p.Visibility = 50 * time.Millisecond
	for _, what := range []string{"delayed", "hidden"} {
		start := time.Now()
		ds := receive(t, q, p)
		if len(ds) != 1 || time.Since(start) > time.Second {
			t.Fatalf("%s message: received %d after %s", what, len(ds), time.Since(start))
		}
	}
}

// Extend to zero releases a message to a Receive that is waiting.
func TestExtendZeroWakes(t *testing.T) {
	q := memqueue.New()
	sendN(t, q, 1)
	d := receive(t, q, params(1))[0]
	time.AfterFunc(50*time.Millisecond, func() {
		if err := q.Extend(ctx, d, 0); err != nil {
			t.Error(err)
		}
	})
	p := params(1)
	p.Wait = 5 * time.Second
	start := time.Now()
	if ds := receive(t, q, p); len(ds) != 1 || ds[0].ReceiveCount != 2 || time.Since(start) > time.Second {
		t.Fatalf("received %+v after %s, want the released message at once", ds, time.Since(start))
	}
}

// TestSizes: a queue's messages are counted as SQS counts them: visible, delayed (never received)
// and in flight (received, hidden).
func TestSizes(t *testing.T) {
	ctx := context.Background()
	q := memqueue.New()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.Send(ctx, task.Message{Lambda: "a", Priority: "high", TaskID: "1"}, task.Message{Lambda: "a", Priority: "high", TaskID: "2"},
		task.Message{Lambda: "a", Priority: "high", TaskID: "3", Delay: time.Hour}, task.Message{Lambda: "b", Priority: "low", TaskID: "4"}))
	if _, err := q.Receive(ctx, task.ReceiveParams{Lambda: "a", Priority: "high", Max: 1, Visibility: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want := []memqueue.Size{{Lambda: "a", Priority: "high", Visible: 1, Delayed: 1, InFlight: 1}, {Lambda: "b", Priority: "low", Visible: 1}}
	if got := q.Sizes(); !slices.Equal(got, want) {
		t.Fatalf("Sizes() = %+v, want %+v", got, want)
	}
}

// A long poll of one priority ends, empty, once a message of another priority of the same
// lambda is visible (a delayed one, here), so that the controller receives it at once; a
// message of another lambda does not end it.
func TestWaitEndsForAnotherPriority(t *testing.T) {
	q := memqueue.New()
	if err := q.Send(ctx, task.Message{Lambda: "other", Priority: "low", TaskID: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(ctx, task.Message{Lambda: "l", Priority: "low", TaskID: "d", Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := q.Receive(wctx, task.ReceiveParams{Lambda: "l", Priority: "high", Max: 10, Wait: time.Minute, Visibility: time.Minute})
	if err != nil || len(ds) != 0 {
		t.Fatalf("the long poll of high ended with %d messages and %v, want none and no error: it must end once low's message is visible", len(ds), err)
	}
	if ds := receive(t, q, task.ReceiveParams{Lambda: "l", Priority: "low", Max: 10, Visibility: time.Minute}); len(ds) != 1 || ds[0].TaskID != "d" {
		t.Fatalf("low then gave %v, want d", ds)
	}
}

// A key's backlog does not hold up the other keys: receives take the keys with visible messages
// in turn, each key's oldest first, and messages without a key are a key of their own.
func TestReceiveKeysRoundRobin(t *testing.T) {
	q := memqueue.New()
	send := func(key, id string) {
		t.Helper()
		if err := q.Send(ctx, task.Message{Lambda: "l", Priority: "p", Key: key, TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		send("noisy", fmt.Sprint("n", i))
	}
	send("a", "a0")
	send("", "none0")
	send("a", "a1")
	send("b", "b0")

	var got []string
	for _, d := range receive(t, q, params(3)) {
		got = append(got, d.TaskID)
	}
	for _, d := range receive(t, q, params(1)) {
		got = append(got, d.TaskID)
	}
	for _, d := range receive(t, q, params(10)) {
		got = append(got, d.TaskID)
	}
	want := []string{"n0", "a0", "none0", "b0", "n1", "a1", "n2", "n3", "n4"}
	if !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}
