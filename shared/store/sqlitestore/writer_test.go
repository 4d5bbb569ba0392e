package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
	"modernc.org/sqlite"
)

// faultHook is called by the SQL function atf_test_fault, which a test's trigger calls on every
// update of a task: a hook inside a real SQLite statement, whose error fails the statement the
// way SQLite reports any error (a full disk, an I/O error, a lock held past the busy timeout).
var faultHook atomic.Pointer[func(id string) error]

func init() {
	// Registered before any test opens a store: functions reach only connections opened later.
	sqlite.MustRegisterScalarFunction("atf_test_fault", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if h := faultHook.Load(); h != nil {
			id, _ := args[0].(string)
			return nil, (*h)(id)
		}
		return nil, nil
	})
}

// injectFault makes every update of a task in s call fault with the task's id first; an error
// fails the update's statement, and with it its group's transaction.
func injectFault(t *testing.T, s *Store, fault func(id string) error) {
	t.Helper()
	if _, err := s.w.ExecContext(t.Context(), `CREATE TRIGGER fault BEFORE UPDATE ON tasks BEGIN SELECT atf_test_fault(NEW.id); END`); err != nil {
		t.Fatal(err)
	}
	faultHook.Store(&fault)
	t.Cleanup(func() { faultHook.Store(nil) })
}

// hangLimit turns a hang into a failure. It is no timing assertion: each write it waits for
// takes milliseconds.
const hangLimit = 20 * time.Second

// twoTasks creates two new tasks and returns them with their enqueued successors.
func twoTasks(t *testing.T, s *Store) (tasks, next [2]task.Task) {
	t.Helper()
	l := task.Lambda{Name: "writer"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	for i := range tasks {
		tk, err := task.New(task.Spec{}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Create(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
		if next[i], err = task.Enqueue(tk, now, cfg); err != nil {
			t.Fatal(err)
		}
		tasks[i] = tk
	}
	return tasks, next
}

// closeWithin closes s, failing the test if Close does not return.
func closeWithin(t *testing.T, s *Store) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(hangLimit):
		t.Fatal("Close hangs")
	}
}

// TestWriterSurvivesGoneCaller: an update whose group commit fails is retried alone. If the retry
// succeeds after its caller stopped waiting, the writer answers it once and goes on: later writes
// and Close still complete. (The writer answered such an update twice, the second answer found
// the reply channel full, and the store's only writer blocked forever.)
func TestWriterSurvivesGoneCaller(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	tasks, next := twoTasks(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	var calls atomic.Int32
	injectFault(t, s, func(id string) error {
		if id != tasks[0].ID || calls.Add(1) > 1 {
			return nil
		}
		// The caller gives up while its group fails, and is gone before the store answers.
		cancel()
		<-returned
		return errors.New("injected: disk I/O error")
	})
	var err error
	go func() {
		err = s.Update(ctx, next[0], tasks[0].Version)
		close(returned)
	}()
	<-returned
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: got %v, want context.Canceled", err)
	}

	wctx, wcancel := context.WithTimeout(t.Context(), hangLimit)
	defer wcancel()
	if err := s.Update(wctx, next[1], tasks[1].Version); err != nil {
		t.Fatalf("a write after the retried one: %v (the writer hangs)", err)
	}
	// The retry alone wrote the first update, though its caller no longer waited.
	if got, err := s.Get(t.Context(), tasks[0].Lambda, tasks[0].ID); err != nil || got.Version != next[0].Version {
		t.Errorf("the retried update: got version %d, %v; want %d", got.Version, err, next[0].Version)
	}
	closeWithin(t, s)
}

// TestCloseDuringFailedGroup: once Close is called, the updates of a failed group fail instead of
// being retried one by one (each retry could wait out the busy timeout), and Close returns.
func TestCloseDuringFailedGroup(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	tasks, next := twoTasks(t, s)

	closing := make(chan error, 1)
	var calls atomic.Int32
	injectFault(t, s, func(id string) error {
		if id != tasks[0].ID || calls.Add(1) > 1 {
			return nil // a retry would succeed
		}
		go func() { closing <- s.Close() }()
		<-s.closed
		return errors.New("injected: disk I/O error")
	})
	ctx, cancel := context.WithTimeout(t.Context(), hangLimit)
	defer cancel()
	if err := s.Update(ctx, next[0], tasks[0].Version); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an update of a group that failed as the store closed: got %v, want the group's error", err)
	}
	select {
	case err := <-closing:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(hangLimit):
		t.Fatal("Close hangs")
	}
}

// TestUpdateBeyondState: an update that changes what transitions never change (the collection,
// the priority, the creation time) is written whole, and listed by its new collection; one from
// a stale version is still refused.
func TestUpdateBeyondState(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	tasks, _ := twoTasks(t, s)
	moved := tasks[0]
	moved.Collection, moved.Priority, moved.CreatedAt = "elsewhere", "low", moved.CreatedAt.Add(time.Second)
	moved.Version++
	if err := s.Update(t.Context(), moved, tasks[0].Version); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(t.Context(), moved, tasks[0].Version); !errors.Is(err, task.ErrConflict) {
		t.Errorf("an update from a stale version: got %v, want ErrConflict", err)
	}
	got, err := s.Get(t.Context(), moved.Lambda, moved.ID)
	if err != nil || got.Collection != "elsewhere" || got.Priority != "low" || !got.CreatedAt.Equal(moved.CreatedAt) {
		t.Errorf("got %+v, %v; want the new collection, priority and creation time", got, err)
	}
	page, _, err := s.List(t.Context(), task.ListParams{Lambda: moved.Lambda, Collection: "elsewhere"})
	if err != nil || len(page) != 1 || page[0].ID != moved.ID {
		t.Errorf("listed by its new collection: got %d tasks, %v", len(page), err)
	}
}
