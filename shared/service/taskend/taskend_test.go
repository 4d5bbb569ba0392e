package taskend_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/taskend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

var ctx = context.Background()

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func open(t *testing.T) *taskend.Store {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return taskend.Wrap(db)
}

func create(t *testing.T, s task.Store, id string) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id}, task.Lambda{Name: "echo"}.WithDefaults(), t0, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWakesOnEnd: 1,000 waiters on 100 tasks are woken by the updates that end their tasks, and
// only by those; stopped, the hub holds none.
func TestWakesOnEnd(t *testing.T) {
	s := open(t)
	const tasks, perTask = 100, 10
	type waiter struct {
		ended <-chan struct{}
		stop  func()
	}
	waiters := make([][]waiter, tasks)
	var wg sync.WaitGroup
	for i := range tasks {
		create(t, s, fmt.Sprint("t", i))
		waiters[i] = make([]waiter, perTask)
		for j := range perTask {
			wg.Go(func() {
				ended, stop := s.Watch("echo", fmt.Sprint("t", i))
				waiters[i][j] = waiter{ended, stop}
			})
		}
	}
	wg.Wait()
	if n := s.Waiters(); n != tasks*perTask {
		t.Fatalf("%d waiters, want %d", n, tasks*perTask)
	}
	// End the even tasks, from as many goroutines.
	for i := 0; i < tasks; i += 2 {
		wg.Go(func() {
			if _, err := task.Apply(ctx, s, "echo", fmt.Sprint("t", i), func(tk task.Task) (task.Task, error) {
				return task.Cancel(tk, t0)
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range tasks {
		for _, w := range waiters[i] {
			if closed(w.ended) != (i%2 == 0) {
				t.Fatalf("task t%d: woken %v, want %v", i, closed(w.ended), i%2 == 0)
			}
			w.stop()
			w.stop() // twice is once
		}
	}
	if n := s.Waiters(); n != 0 {
		t.Errorf("%d waiters after every stop, want 0", n)
	}
}

// TestOnlyEndsWake: an update that leaves the task waiting, or that fails, wakes nobody; a
// waiter that comes after an end waits for the next.
func TestOnlyEndsWake(t *testing.T) {
	s := open(t)
	tk := create(t, s, "a")
	ended, stop := s.Watch("echo", "a")
	defer stop()
	stale := tk
	parked := tk
	parked.Parked, parked.Version = true, tk.Version+1
	if err := s.Update(ctx, parked, tk.Version); err != nil {
		t.Fatal(err)
	}
	if closed(ended) {
		t.Fatal("an update that leaves the task new woke its waiter")
	}
	cancelled, err := task.Cancel(stale, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, cancelled, stale.Version); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if closed(ended) {
		t.Fatal("a failed update woke the waiter")
	}
	if _, err := task.Apply(ctx, s, "echo", "a", func(tk task.Task) (task.Task, error) { return task.Cancel(tk, t0) }); err != nil {
		t.Fatal(err)
	}
	if !closed(ended) {
		t.Fatal("the end of the task did not wake its waiter")
	}
	later, stopLater := s.Watch("echo", "a")
	defer stopLater()
	if closed(later) {
		t.Error("a waiter that came after the end was woken by it")
	}
	stop()
	if n := s.Waiters(); n != 1 {
		t.Errorf("%d waiters, want 1: stopping the woken one leaves the later one", n)
	}
}
