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
