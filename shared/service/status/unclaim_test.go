package status_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
)

// TestUnclaim: a claim written whose answer was lost is handed back by its delivery and token:
// the task is new again, its attempt not counted, its lease gone. Another delivery or token, or a
// claim never written, finds no claim of its own to hand back (task.ErrStaleLease), and an
// unclaim without a token is refused (task.ErrInvalid); either leaves the task as it is.
func TestUnclaim(t *testing.T) {
	store, _ := enqueuedTask(t)
	lost := &chaostest.LostClaimAnswers{Store: store}
	hsc := status.New(lost, status.Config{Task: task.Config{}.WithDefaults(), Logger: slog.New(slog.DiscardHandler)})

	if err := hsc.Unclaim(t.Context(), "l", "d1", "receipt-1", "token-1"); !errors.Is(err, task.ErrStaleLease) {
		t.Fatalf("unclaim of a claim never written: %v, want ErrStaleLease", err)
	}
	if tk, _ := store.Get(t.Context(), "l", "d1"); tk.Status != task.StatusEnqueued {
		t.Fatalf("unclaim of a claim never written left the task %s, want enqueued", tk.Status)
	}
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "token-1"); err == nil || task.Refused(err) {
		t.Fatalf("claim whose answer is lost: %v, want an error that is not a refusal", err)
	}
	if tk, _ := store.Get(t.Context(), "l", "d1"); tk.Status != task.StatusProcessing || tk.Attempts != 1 {
		t.Fatalf("the lost claim left the task %s, attempt %d; want it written: processing, attempt 1", tk.Status, tk.Attempts)
	}
	for _, other := range [][2]string{{"receipt-2", "token-1"}, {"receipt-1", "token-2"}, {"", "token-1"}, {"receipt-1", ""}} {
		if err := hsc.Unclaim(t.Context(), "l", "d1", other[0], other[1]); !errors.Is(err, task.ErrStaleLease) && !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("unclaim for delivery %q, token %q: %v, want a refusal", other[0], other[1], err)
		}
	}
	if err := hsc.Unclaim(t.Context(), "l", "d1", "receipt-1", "token-1"); err != nil {
		t.Fatalf("unclaim of the lost claim: %v", err)
	}
	tk, _ := store.Get(t.Context(), "l", "d1")
	if tk.Status != task.StatusNew || tk.Attempts != 0 || tk.Lease != "" || tk.NextTriggerAt == nil {
		t.Fatalf("after the unclaim: %s, attempt %d, lease %q, due %v; want new, attempt 0, no lease, due", tk.Status, tk.Attempts, tk.Lease, tk.NextTriggerAt)
	}
	if err := hsc.Unclaim(t.Context(), "l", "d1", "receipt-1", "token-1"); !errors.Is(err, task.ErrStaleLease) {
		t.Fatalf("a second unclaim: %v, want ErrStaleLease", err)
	}
}

// TestUnclaimCancelled: a task cancelled after its claim was written, whose answer was lost,
// ends cancelled when the claim is handed back: its handler never ran, so no attempt is spent
// and its history has none.
func TestUnclaimCancelled(t *testing.T) {
	store, _ := enqueuedTask(t)
	lost := &chaostest.LostClaimAnswers{Store: store}
	hsc := status.New(lost, status.Config{Task: task.Config{}.WithDefaults(), Logger: slog.New(slog.DiscardHandler)})
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "token-1"); err == nil {
		t.Fatal("claim whose answer is lost: answered")
	}
	if _, err := task.Apply(t.Context(), store, "l", "d1", func(tk task.Task) (task.Task, error) { return task.Cancel(tk, tk.UpdatedAt) }); err != nil {
		t.Fatal(err)
	}
	if err := hsc.Unclaim(t.Context(), "l", "d1", "receipt-1", "token-1"); err != nil {
		t.Fatalf("unclaim: %v", err)
	}
	if tk, _ := store.Get(t.Context(), "l", "d1"); tk.Status != task.StatusCancelled || tk.Attempts != 0 {
		t.Fatalf("after the unclaim: %s, %d attempts; want cancelled, none spent", tk.Status, tk.Attempts)
	}
	if h, err := store.Attempts(t.Context(), "l", "d1"); err != nil || len(h.Attempts) != 0 {
		t.Errorf("history after the unclaim: %+v, %v; want no attempt", h.Attempts, err)
	}
}
