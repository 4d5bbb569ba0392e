package status_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestClaimerClaimsOnce: claims made together, two for each task (two deliveries of its
// message), claim every task exactly once, each under a lease of its own, and the losers get
// task.ErrConflict; a claim of a task that does not exist gets task.ErrNotFound, and one whose
// lambda's gate is paused hands its task back, new.
func TestClaimerClaimsOnce(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	const n = 50
	for _, lambda := range []string{"l", "gated"} {
		for i := range n {
			tk, err := task.New(task.Spec{ID: "c" + strconv.Itoa(i)}, task.Lambda{Name: lambda}.WithDefaults(), now, cfg)
			if err != nil {
				t.Fatal(err)
			}
			enq, _ := task.Enqueue(tk, now, cfg)
			if err := store.Create(t.Context(), enq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := store.SetGate(t.Context(), task.Gate{Lambda: "gated", Mode: task.GatePause, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(store.Unsynced(), status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler)})
	k := status.NewClaimer(hsc)
	defer k.Close()

	type outcome struct {
		id, lease string
		err       error
	}
	var mu sync.Mutex
	var got []outcome
	var wg sync.WaitGroup
	for i := range n {
		for d := range 2 {
			wg.Go(func() {
				id := "c" + strconv.Itoa(i)
				c, err := k.Claim(t.Context(), "l", id, "receipt-"+strconv.Itoa(d), "")
				mu.Lock()
				got = append(got, outcome{id, c.Lease, err})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	won := map[string]string{}
	for _, o := range got {
		switch {
		case o.err == nil:
			if prev, ok := won[o.id]; ok {
				t.Errorf("task %s claimed twice, under %s and %s", o.id, prev, o.lease)
			}
			won[o.id] = o.lease
		case !errors.Is(o.err, task.ErrConflict):
			t.Errorf("task %s: the losing claim got %v, want ErrConflict", o.id, o.err)
		}
	}
	for i := range n {
		id := "c" + strconv.Itoa(i)
		stored, err := store.Get(t.Context(), "l", id)
		if err != nil || stored.Status != task.StatusProcessing || stored.Lease != won[id] || stored.Attempts != 1 {
			t.Errorf("task %s: %s under %q, attempt %d, %v; want processing under the winner's lease %q, attempt 1", id, stored.Status, stored.Lease, stored.Attempts, err, won[id])
		}
	}

	if _, err := k.Claim(t.Context(), "l", "missing", "r", ""); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("a claim of a task that does not exist: got %v, want ErrNotFound", err)
	}
	if _, err := k.Claim(t.Context(), "gated", "c0", "r", ""); !errors.Is(err, task.ErrConflict) {
		t.Errorf("a claim behind a paused gate: got %v, want ErrConflict", err)
	}
	if held, err := store.Get(t.Context(), "gated", "c0"); err != nil || held.Status != task.StatusNew {
		t.Errorf("the task behind a paused gate: %s, %v; want new", held.Status, err)
	}
}

// readCounter counts the reads of tasks made through it.
type readCounter struct {
	task.Store
	mu    sync.Mutex
	reads int
}

func (r *readCounter) read() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
}

func (r *readCounter) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	r.read()
	return r.Store.Get(ctx, lambda, id)
}

func (r *readCounter) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	r.read()
	return r.Store.GetMany(ctx, refs)
}

func (r *readCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// TestClaimerStartsFromState: a claim whose message carries its task as its sender wrote it
// (task.Message.State, status.WithState) claims without reading it; one whose task moved since
// (cancelled) is refused by the write, conditional on that version, and decided from a read: the
// task stays cancelled. Two deliveries of one message claim it once.
func TestClaimerStartsFromState(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cfg, now := t.Context(), task.Config{}.WithDefaults(), time.Now().UTC()
	enqueued := func(id string) task.Task {
		tk, err := task.New(task.Spec{ID: id}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
		if err == nil {
			tk, err = task.Enqueue(tk, now, cfg)
		}
		if err == nil {
			err = store.Create(ctx, tk)
		}
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	reads := &readCounter{Store: store.Volatile()}
	k := status.NewClaimer(status.New(reads, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler)}))
	defer k.Close()

	a := enqueued("a")
	var wg sync.WaitGroup
	var won, lost sync.Map
	for d := range 2 {
		wg.Go(func() {
			c, err := k.Claim(status.WithState(ctx, &a), "l", "a", "receipt-"+strconv.Itoa(d), "")
			if err == nil {
				won.Store(d, c)
			} else {
				lost.Store(d, err)
			}
		})
	}
	wg.Wait()
	wins := 0
	won.Range(func(_, c any) bool {
		wins++
		if got := c.(task.Task); got.Status != task.StatusProcessing || got.Version != a.Version+1 {
			t.Errorf("the claim from the message's state: %s at version %d; want processing at %d", got.Status, got.Version, a.Version+1)
		}
		return true
	})
	if wins != 1 {
		t.Errorf("two deliveries of one message: %d claims won; want 1", wins)
	}

	b := enqueued("b")
	cancelled, _ := task.Cancel(b, now)
	if err := store.Update(ctx, cancelled, b.Version); err != nil {
		t.Fatal(err)
	}
	before := reads.count()
	if _, err := k.Claim(status.WithState(ctx, &b), "l", "b", "receipt", ""); err == nil {
		t.Error("the claim of a task cancelled after its message was sent succeeded")
	}
	if got, err := store.Get(ctx, "l", "b"); err != nil || got.Status != task.StatusCancelled {
		t.Errorf("the task after the stale claim: %s, %v; want cancelled", got.Status, err)
	}
	if reads.count() == before {
		t.Error("the claim refused by its write did not read the task")
	}

	c := enqueued("c")
	before = reads.count()
	if _, err := k.Claim(status.WithState(ctx, &c), "l", "c", "receipt", ""); err != nil {
		t.Fatal(err)
	}
	if got := reads.count() - before; got != 0 {
		t.Errorf("a claim from its message's state read the task %d times; want none", got)
	}
}
