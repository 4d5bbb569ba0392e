package executor_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// answerLoss writes every Update and loses the answers of those it is told to, as a connection
// reset after the write committed; it records the deadline of each Update's context.
type answerLoss struct {
	task.Store
	mu        sync.Mutex
	lose      int  // how many of the next Updates lose their answer
	loseAll   bool // every Update that claims (enqueued to processing) loses its answer
	deadlines []time.Time
}

var errLost = errors.New("injected: written, and the answer lost")

func (s *answerLoss) Update(ctx context.Context, t task.Task, prev int64) error {
	s.mu.Lock()
	d, _ := ctx.Deadline()
	s.deadlines = append(s.deadlines, d)
	lose := s.lose > 0 || s.loseAll && t.From == task.StatusEnqueued && t.Status == task.StatusProcessing
	if s.lose > 0 {
		s.lose--
	}
	s.mu.Unlock()
	if err := s.Store.Update(ctx, t, prev); err != nil || !lose {
		return err
	}
	return errLost
}

// newEnqueued is a store holding task t1 of lambda l, enqueued, and an executor over it.
func newEnqueued(t *testing.T) (*answerLoss, *executor.Executor, task.Lambda) {
	inner, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	store := &answerLoss{Store: inner}
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: "l", MaxAttempts: 3}.WithDefaults()
	tk, err := task.New(task.Spec{ID: "t1"}, l, time.Now().UTC(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, tk.RunAt, cfg)
	if err := inner.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(store, status.Config{Task: cfg, Logger: quietLog})
	return store, executor.New(hsc, executor.Config{Task: cfg, Logger: quietLog}), l
}

// TestSameDeliveryOtherCaller: two callers claim with the same delivery, as when an event source
// mapping processes a batch twice. The second is refused (a conflict), not handed the first's
// claim to run beside it; and when the second's claim fails with its answer lost, its hand-back
// cannot take the task from the first, which still runs it.
func TestSameDeliveryOtherCaller(t *testing.T) {
	store, e, l := newEnqueued(t)
	first, err := e.Claim(t.Context(), l.Name, "t1", "receipt-1")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := e.Claim(t.Context(), l.Name, "t1", "receipt-1"); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("a second caller of the same delivery: claim %+v, %v; want a conflict", c.Task, err)
	}
	store.lose = 1
	if _, err := e.Claim(t.Context(), l.Name, "t1", "receipt-1"); err == nil {
		t.Fatal("a second caller of the same delivery, its answer lost: answered")
	}
	stored, err := store.Get(t.Context(), l.Name, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != task.StatusProcessing || stored.Lease != first.Lease || stored.Attempts != 1 {
		t.Fatalf("after the second caller's failed claim the task is %s, attempt %d, lease held %t; want processing under the first's lease, attempt 1",
			stored.Status, stored.Attempts, stored.Lease == first.Lease)
	}
}

// TestHandBacksBounded: a claim whose write always lands and whose answer is always lost is
// handed back task.MaxHandBacks times for one attempt, and no more: the next stays written, to be
// counted at its heartbeat timeout, so that such a task still reaches dead.
func TestHandBacksBounded(t *testing.T) {
	store, e, l := newEnqueued(t)
	store.loseAll = true
	cfg := task.Config{}.WithDefaults()
	for i := 1; i <= task.MaxHandBacks+1; i++ {
		if _, err := e.Claim(t.Context(), l.Name, "t1", "receipt-"+string(rune('0'+i))); err == nil {
			t.Fatalf("claim %d: answered", i)
		}
		stored, err := store.Get(t.Context(), l.Name, "t1")
		if err != nil {
			t.Fatal(err)
		}
		if i <= task.MaxHandBacks {
			if stored.Status != task.StatusNew || stored.Attempts != 0 {
				t.Fatalf("claim %d: the task is %s at attempt %d; want it handed back, new at attempt 0", i, stored.Status, stored.Attempts)
			}
			enq, _ := task.Enqueue(stored, time.Now().UTC(), cfg)
			if err := store.Store.Update(t.Context(), enq, stored.Version); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if stored.Status != task.StatusProcessing || stored.Attempts != 1 {
			t.Fatalf("claim %d: the task is %s at attempt %d; want the claim kept, processing at attempt 1, to time out", i, stored.Status, stored.Attempts)
		}
	}
}

// TestUnclaimWithinDeadline: a claim made under a deadline (a Lambda invocation's) keeps time
// for its unclaim, and the unclaim ends by the deadline, not 10 s after it: past it the runtime
// ends the invocation, and its batch's answer is lost.
func TestUnclaimWithinDeadline(t *testing.T) {
	store, e, l := newEnqueued(t)
	store.lose = 1
	deadline := time.Now().Add(4 * time.Second)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	if _, err := e.Claim(ctx, l.Name, "t1", "receipt-1"); err == nil {
		t.Fatal("claim whose answer was lost: answered")
	}
	if len(store.deadlines) != 2 {
		t.Fatalf("%d writes, want the claim's and its unclaim's", len(store.deadlines))
	}
	claimEnd, unclaimEnd := store.deadlines[0], store.deadlines[1]
	if claimEnd.After(deadline.Add(-time.Second)) || unclaimEnd.After(deadline) || !unclaimEnd.After(claimEnd) {
		t.Fatalf("the claim ran until %s before the deadline, its unclaim until %s after it; want the claim to end well before it (keeping time for the unclaim), the unclaim by it",
			deadline.Sub(claimEnd), unclaimEnd.Sub(deadline))
	}
	if stored, _ := store.Get(t.Context(), l.Name, "t1"); stored.Status != task.StatusNew {
		t.Fatalf("the task is %s, want it handed back", stored.Status)
	}
}
