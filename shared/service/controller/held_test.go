package controller

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
)

// holdFirst holds back the first n claims of each task by a rate, until a moment from now, as a
// store whose limit is taken would; later claims go through.
type holdFirst struct {
	executor.Status
	n   int
	mu  sync.Mutex
	got map[string]int
}

func (h *holdFirst) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	h.mu.Lock()
	h.got[id]++
	held := h.got[id] <= h.n
	h.mu.Unlock()
	if held {
		return task.Task{}, &task.Held{Limit: "rate", Until: time.Now().Add(10 * time.Millisecond)}
	}
	return h.Status.Claim(ctx, lambda, id, delivery, token)
}

// TestHeldComesBackAtUntil: the message of a claim held by a limit comes back when the limit
// says, not after the queue's visibility (a minute here), and its task then runs as its first
// attempt. From executor.HoldResendAt receives it is sent again rather than hidden, so that its
// receive count starts again at one and never reaches a dead-letter queue's; with
// MessageTimesLease too, since a held claim wrote nothing for the message to time.
func TestHeldComesBackAtUntil(t *testing.T) {
	t.Parallel()
	for _, timesLease := range []bool{false, true} {
		h := newHarness(t, 1)
		h.status = &holdFirst{Status: h.status, n: executor.HoldResendAt, got: map[string]int{}}
		h.enqueue("t", "normal")
		h.start(Config{Visibility: time.Minute, MessageTimesLease: timesLease})
		if got := h.waitStatus("t", task.StatusSuccess); got.Attempts != 1 {
			t.Fatalf("MessageTimesLease %v: the task succeeded at attempt %d, want 1: holds count none", timesLease, got.Attempts)
		}
		h.queue.mu.Lock()
		counts := slices.Clone(h.queue.receiveCounts["t"])
		h.queue.mu.Unlock()
		want := []int{1, 2, 3, 4, 5, 1} // held five times; the fifth is sent again, fresh
		if !slices.Equal(counts, want) {
			t.Fatalf("MessageTimesLease %v: received with counts %v, want %v", timesLease, counts, want)
		}
	}
}

// earlyFirst refuses the first claim of each task as early, until a moment from now, as a
// status controller does for a message back before its task's run time or lease end.
type earlyFirst struct {
	executor.Status
	mu  sync.Mutex
	got map[string]int
}

func (e *earlyFirst) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	e.mu.Lock()
	e.got[id]++
	first := e.got[id] == 1
	e.mu.Unlock()
	if first {
		return task.Task{}, &task.Early{Until: time.Now().Add(10 * time.Millisecond), Msg: "not due yet"}
	}
	return e.Status.Claim(ctx, lambda, id, delivery, token)
}

// TestEarlyComesBackWhenDue: the message of a claim refused as early, with when its task is due
// (task.DueAt), comes back then, not after the queue's visibility (a minute here).
func TestEarlyComesBackWhenDue(t *testing.T) {
	t.Parallel()
	for _, timesLease := range []bool{false, true} {
		h := newHarness(t, 1)
		h.status = &earlyFirst{Status: h.status, got: map[string]int{}}
		h.enqueue("t", "normal")
		h.start(Config{Visibility: time.Minute, MessageTimesLease: timesLease})
		if got := h.waitStatus("t", task.StatusSuccess); got.Attempts != 1 {
			t.Fatalf("MessageTimesLease %v: the task succeeded at attempt %d, want 1", timesLease, got.Attempts)
		}
	}
}

// capWhile holds back the claims of task id by a concurrency cap while full is set.
type capWhile struct {
	executor.Status
	id   string
	mu   sync.Mutex
	full bool
	held int
}

func (c *capWhile) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	c.mu.Lock()
	if id == c.id && c.full {
		c.held++
		c.mu.Unlock()
		return task.Task{}, &task.Held{Limit: "max_running"}
	}
	c.mu.Unlock()
	return c.Status.Claim(ctx, lambda, id, delivery, token)
}

func (c *capWhile) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// TestRunEndWakesCapped: when a run ends, the message of a claim a cap held, hidden until its
// hold ends, is made visible at once (the run may have freed its place), and its task then runs.
func TestRunEndWakesCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	capped := &capWhile{Status: h.status, id: "b", full: true}
	h.status = capped
	release := h.blocker("a")
	h.enqueue("a", "normal")
	h.enqueue("b", "normal")
	h.start(Config{Visibility: time.Minute})
	for deadline := time.Now().Add(10 * time.Second); capped.heldCount() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b's claim was never held")
		}
	}
	capped.mu.Lock()
	capped.full = false
	capped.mu.Unlock()
	release()
	h.waitStatus("b", task.StatusSuccess)
	h.queue.mu.Lock()
	woken := h.queue.woken["b"]
	h.queue.mu.Unlock()
	if woken == 0 {
		t.Fatal("b's held message was not woken when a's run ended")
	}
}
