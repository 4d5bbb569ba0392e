package controller

import (
	"context"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// TestMessageTimesLeaseHidesWhileRunning: with MessageTimesLease the claim names the task's
// message, which stays hidden, extended, for as long as the task runs, past its visibility, and
// is deleted once the run's end is written: one receive, no refused extension.
func TestMessageTimesLeaseHidesWhileRunning(t *testing.T) {
	t.Parallel()
	const visibility = time.Second
	h := newHarness(t, 1)
	unblock := h.blocker("long")
	h.enqueue("long", "normal")
	h.start(Config{Visibility: visibility, MessageTimesLease: true})
	waitFor(t, "the task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
	if got := h.get("long"); !got.LeaseOnQueue() {
		t.Fatalf("the running task is not timed by its message: message %q for lease %q, lease %q", got.Message, got.MessageFor, got.Lease)
	}
	waitFor(t, "three extensions of the running task's message", 20*visibility, func() bool {
		_, extended := h.queue.counts("long")
		return extended >= 3 || h.queue.refusals("long") > 0
	})
	if n := h.queue.refusals("long"); n > 0 {
		t.Fatalf("the running task's message became visible before it was extended (%d extensions refused)", n)
	}
	unblock()
	h.waitStatus("long", task.StatusSuccess)
	waitFor(t, "the message to be deleted", 5*time.Second, func() bool { return h.queue.deletions() == 1 })
	if received, _ := h.queue.counts("long"); received != 1 {
		t.Fatalf("the message was received %d times, want once", received)
	}
}

// noResult is a status controller whose results never get through.
type noResult struct{ executor.Status }

func (noResult) SetResult(context.Context, string, string, string, status.Result) (task.Task, error) {
	return task.Task{}, task.Errorf(task.ErrUnavailable, "injected: the status controller is unreachable")
}

// TestMessageTimesLeaseKeptWhenEndNotWritten: a run whose end could not be written leaves its
// message in the queue, undeleted: it comes back, and its claim, once the lease is over, times
// the attempt out, so the task runs again rather than stay processing with no timer.
func TestMessageTimesLeaseKeptWhenEndNotWritten(t *testing.T) {
	t.Parallel()
	const visibility = time.Second
	h := newHarness(t, 1)
	h.status = noResult{h.status}
	h.enqueue("lost", "normal")
	h.start(Config{Visibility: visibility, MessageTimesLease: true})
	waitFor(t, "the task to run", 5*time.Second, func() bool { return len(h.startedIDs()) >= 1 })
	// The message comes back after its visibility and is claimed again, refused while the lease
	// lasts (the status controller's heartbeat timeout), and is never deleted meanwhile.
	waitFor(t, "the message to come back", 10*visibility, func() bool {
		received, _ := h.queue.counts("lost")
		return received >= 2
	})
	if n := h.queue.deletions(); n != 0 {
		t.Fatalf("%d messages deleted; the run's end was never written, so none may be", n)
	}
	if got := h.get("lost"); got.Status != task.StatusProcessing || !got.LeaseOnQueue() {
		t.Fatalf("task %s, timed by its message %v; want processing, timed by it", got.Status, got.LeaseOnQueue())
	}
}

// deletions counts the messages the queue deleted.
func (q *countingQueue) deletions() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.deleted)
}
