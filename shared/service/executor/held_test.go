package executor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
)

// heldClaims holds back every claim by a limit, and counts the unclaims it is sent.
type heldClaims struct {
	executor.Status
	unclaims atomic.Int32
}

func (h *heldClaims) Claim(context.Context, string, string, string, string) (task.Task, error) {
	return task.Task{}, &task.Held{Limit: "max_running"}
}

func (h *heldClaims) Unclaim(context.Context, string, string, string, string) error {
	h.unclaims.Add(1)
	return task.Errorf(task.ErrStaleLease, "nothing to hand back")
}

// TestHeldClaimNotHandedBack: a claim held by a limit wrote nothing, so the executor does not
// send an unclaim for it, as it would for a claim whose outcome is unknown.
func TestHeldClaimNotHandedBack(t *testing.T) {
	st := &heldClaims{}
	_, err := executor.New(st, executor.Config{Logger: quietLog}).Claim(t.Context(), "l", "t", "receipt")
	if held := (*task.Held)(nil); !errors.As(err, &held) {
		t.Fatalf("claim: %v, want the *task.Held", err)
	}
	if n := st.unclaims.Load(); n != 0 {
		t.Fatalf("%d unclaims sent for a held claim, want none", n)
	}
}

func TestHoldDelay(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	rate := func(in time.Duration) error { return &task.Held{Limit: "rate", Until: now.Add(in)} }
	capped := &task.Held{Limit: "key_concurrency"}
	for _, c := range []struct {
		err      error
		receives int
		want     time.Duration
	}{
		{rate(200 * time.Millisecond), 1, 200 * time.Millisecond},
		{rate(200 * time.Millisecond), 7, 200 * time.Millisecond}, // a rate's Until, whatever the count
		{rate(-time.Second), 1, 0},                                // past already: back at once
		{rate(time.Hour), 1, executor.MaxHold},
		{capped, 0, time.Second},
		{capped, 1, time.Second},
		{capped, 2, 2 * time.Second},
		{capped, 3, 4 * time.Second},
		{capped, 9, 4 * time.Second},
	} {
		if got := executor.HoldDelay(c.err, c.receives, now); got != c.want {
			t.Errorf("HoldDelay(%v, %d) = %s, want %s", c.err, c.receives, got, c.want)
		}
	}
	for n, want := range map[int]bool{1: false, executor.HoldResendAt - 1: false, executor.HoldResendAt: true, 9: true} {
		if got := executor.HoldResend(n); got != want {
			t.Errorf("HoldResend(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestDueDelay: a message refused as early stays hidden until its task is due, a second at
// least, MaxHold at most.
func TestDueDelay(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		due  time.Time
		want time.Duration
	}{
		{now.Add(5 * time.Second), 5 * time.Second},
		{now.Add(-time.Second), time.Second},
		{now.Add(100 * time.Millisecond), time.Second},
		{now.Add(24 * time.Hour), executor.MaxHold},
	} {
		if got := executor.DueDelay(c.due, now); got != c.want {
			t.Errorf("DueDelay(now%+v): %v, want %v", c.due.Sub(now), got, c.want)
		}
	}
}
