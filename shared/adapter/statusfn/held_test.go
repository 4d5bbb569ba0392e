package statusfn_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
)

// holding holds back every claim by a limit: the rate's until a fixed time, the key
// concurrency's with none.
type holding struct {
	executor.Status
	until time.Time
}

func (h holding) Claim(_ context.Context, _, id, _, _ string) (task.Task, error) {
	if id == "capped" {
		return task.Task{}, &task.Held{Limit: "key_concurrency"}
	}
	return task.Task{}, &task.Held{Limit: "rate", Until: h.until}
}

// TestClaimHeldCrosses: a claim held by a limit reaches the worker as a *task.Held, its limit and
// its Until intact (none when the limit gives none), alone and in a batch; and it counts as a
// refusal (task.Refused), since nothing was written, so the worker hands nothing back.
func TestClaimHeldCrosses(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 11, 28, 12, 0, 0, 200_000_000, time.UTC)
	h := statusfn.NewHandler(holding{until: until}, slog.New(slog.DiscardHandler))
	check := func(t *testing.T, id string, err error) {
		t.Helper()
		var held *task.Held
		if !errors.As(err, &held) || !errors.Is(err, task.ErrHeld) || !task.Refused(err) {
			t.Fatalf("claim of %s: %v, want a refusal that is a *task.Held", id, err)
		}
		got, ok := task.HeldUntil(err)
		switch id {
		case "capped":
			if held.Limit != "key_concurrency" || ok {
				t.Fatalf("claim of %s: held by %s until %s (%v), want key_concurrency with no until", id, held.Limit, got, ok)
			}
		default:
			if held.Limit != "rate" || !ok || !got.Equal(until) {
				t.Fatalf("claim of %s: held by %s until %s (%v), want rate until %s", id, held.Limit, got, ok, until)
			}
		}
	}
	t.Run("alone", func(t *testing.T) {
		c := statusfn.NewClient(statusfn.LocalInvoker{Handler: h})
		for _, id := range []string{"rated", "capped"} {
			_, err := c.Claim(t.Context(), "echo", id, "receipt-"+id, "token")
			check(t, id, err)
		}
	})
	t.Run("batched", func(t *testing.T) {
		c := statusfn.NewClientBatches(statusfn.LocalInvoker{Handler: h}, never, 2)
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, id := range []string{"rated", "capped"} {
			wg.Go(func() {
				_, err := c.Claim(context.Background(), "echo", id, "receipt-"+id, "token")
				mu.Lock()
				errs[id] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		for id, err := range errs {
			check(t, id, err)
		}
	})
}

// early refuses every claim as early: until a fixed time, or, for "skewed", with none known.
type early struct {
	executor.Status
	until time.Time
}

func (e early) Claim(_ context.Context, _, id, _, _ string) (task.Task, error) {
	if id == "skewed" {
		return task.Task{}, task.Errorf(task.ErrNotDue, "task %s is not due", id)
	}
	return task.Task{}, &task.Early{Until: e.until, Msg: "task " + id + " is not due until then"}
}

// TestClaimNotDueCrosses: a claim refused as early reaches the worker as task.ErrNotDue, with
// until when if the controller knew it (task.DueAt), so that its worker hides the message until
// then; with none, without.
func TestClaimNotDueCrosses(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 11, 28, 12, 0, 30, 0, time.UTC)
	c := statusfn.NewClient(statusfn.LocalInvoker{Handler: statusfn.NewHandler(early{until: until}, slog.New(slog.DiscardHandler))})
	_, err := c.Claim(t.Context(), "echo", "lease-timed", "receipt", "token")
	if got, ok := task.DueAt(err); !errors.Is(err, task.ErrNotDue) || !task.Refused(err) || !ok || !got.Equal(until) {
		t.Fatalf("claim refused until %s: %v (due at %s, %v), want not due until then", until, err, got, ok)
	}
	_, err = c.Claim(t.Context(), "echo", "skewed", "receipt", "token")
	if got, ok := task.DueAt(err); !errors.Is(err, task.ErrNotDue) || ok {
		t.Fatalf("claim refused with no until: %v (due at %s, %v), want not due, with none", err, got, ok)
	}
}
