// Package taskend tells waiters when a task ends, so that a wait for a task's result
// (frontend.Service.Wait) sleeps until the write that ends it instead of polling the store. It
// wraps the store every service of one process writes through: it sees each write, so it only
// fits a store that this process alone writes, as atf dev's embedded store.
package taskend

import (
	"context"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// Store is a task.Store that wakes the waiters of a task after a successful Update that leaves
// the task terminal. It implements frontend.Changes.
type Store struct {
	task.Store
	*waiters // shared with the stores Through returns
}

// waiters are the waiters of tasks' ends.
type waiters struct {
	mu      sync.Mutex
	tasks   map[task.Ref]*watch
	waiting int // Watch calls not yet stopped
}

// watch is what the waiters of one task share: closing ended wakes them all.
type watch struct {
	ended   chan struct{}
	waiters int
}

// Wrap returns s with waiters of tasks' ends.
func Wrap(s task.Store) *Store {
	return &Store{Store: s, waiters: &waiters{tasks: map[task.Ref]*watch{}}}
}

// Through returns a Store that writes through w, another view of the wrapped store (such as
// sqlitestore.Store.Unsynced), and wakes the same waiters: the services that write through
// either one wake every wait.
func (s *Store) Through(w task.Store) *Store {
	return &Store{Store: w, waiters: s.waiters}
}

// Update writes t (see task.Store) and, if it did and t is terminal, wakes its waiters.
func (s *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	if t.Status.Terminal() {
		s.wake(task.Ref{Lambda: t.Lambda, ID: t.ID})
	}
	return nil
}

// Unwrap returns the store that s wraps (see task.Batched).
func (s *Store) Unwrap() task.Store { return s.Store }

// UpdateMany writes ws (see task.UpdateMany) and wakes the waiters of each task it wrote terminal.
func (s *Store) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	errs := task.UpdateMany(ctx, s.Store, ws)
	for i, w := range ws {
		if errs[i] == nil && w.Task.Status.Terminal() {
			s.wake(task.Ref{Lambda: w.Task.Lambda, ID: w.Task.ID})
		}
	}
	return errs
}

// GetBatch reads through the wrapped store's GetBatch, or one Get after another (task.GetBatch).
func (s *Store) GetBatch(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	return task.GetBatch(ctx, s.Store, refs)
}

// GetState reads through the wrapped store's GetState if it has one (task.StateReader), and
// Get otherwise, so that wrapping a store keeps its cheaper reads.
func (s *Store) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	if r, ok := s.Store.(task.StateReader); ok {
		return r.GetState(ctx, lambda, id)
	}
	return s.Get(ctx, lambda, id)
}

// Watch returns a channel closed when the task lambda/id is next written terminal, and stop,
// which forgets the waiter; call it once done waiting, woken or not. A waiter registers before
// it reads the task, so an end written between its read and its sleep still wakes it.
func (s *Store) Watch(lambda, id string) (ended <-chan struct{}, stop func()) {
	ref := task.Ref{Lambda: lambda, ID: id}
	s.mu.Lock()
	w := s.tasks[ref]
	if w == nil {
		w = &watch{ended: make(chan struct{})}
		s.tasks[ref] = w
	}
	w.waiters++
	s.waiting++
	s.mu.Unlock()
	var once sync.Once
	return w.ended, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.waiting--
			// A woken watch has left the map already; a later one may have taken its place.
			if w.waiters--; w.waiters == 0 && s.tasks[ref] == w {
				delete(s.tasks, ref)
			}
		})
	}
}

func (s *waiters) wake(ref task.Ref) {
	s.mu.Lock()
	w := s.tasks[ref]
	delete(s.tasks, ref)
	s.mu.Unlock()
	if w != nil {
		close(w.ended)
	}
}

// Waiters returns how many waiters are registered: Watch calls not yet stopped.
func (s *waiters) Waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}
