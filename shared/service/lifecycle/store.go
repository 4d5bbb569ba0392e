package lifecycle

import (
	"context"

	"github.com/openatf/atf/shared/task"
)

// Publish takes an event to send. It must not block: it runs on the task path, after a store
// write. *Publisher implements it.
type Publish interface {
	Publish(e Event)
}

// Store is a task.Store that publishes the lifecycle event of every successful write that makes
// one: Create, CreateBatch and FireSchedule (scheduled), Update and AddUpstreams (see Written). A write that
// fails publishes nothing; so does one whose answer is lost although it was written (see
// docs/guarantees.md).
type Store struct {
	task.Store
	pub Publish
}

var _ task.Store = (*Store)(nil)

// Wrap returns s publishing its writes' events to pub.
func Wrap(s task.Store, pub Publish) *Store { return &Store{Store: s, pub: pub} }

// Create stores t (see task.Store) and publishes its scheduled event.
func (s *Store) Create(ctx context.Context, t task.Task) error {
	if err := s.Store.Create(ctx, t); err != nil {
		return err
	}
	s.pub.Publish(Created(t))
	return nil
}

// CreateBatch stores tasks (see task.Store) and publishes a scheduled event for each.
func (s *Store) CreateBatch(ctx context.Context, tasks []task.Task) error {
	if err := s.Store.CreateBatch(ctx, tasks); err != nil {
		return err
	}
	for _, t := range tasks {
		s.pub.Publish(Created(t))
	}
	return nil
}

// FireSchedule makes a schedule's firings (see task.ScheduleStore) and publishes a scheduled
// event for each task it created.
func (s *Store) FireSchedule(ctx context.Context, sc task.Schedule, prev int64, tasks []task.Task) ([]bool, error) {
	created, err := s.Store.FireSchedule(ctx, sc, prev, tasks)
	if err != nil {
		return nil, err
	}
	for i, t := range tasks {
		if created[i] {
			s.pub.Publish(Created(t))
		}
	}
	return created, nil
}

// Update writes t (see task.Store) and publishes the event of its transition, if it makes one.
func (s *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	s.written(t)
	return nil
}

// Unwrap returns the store that s wraps (see task.Batched).
func (s *Store) Unwrap() task.Store { return s.Store }

// UpdateMany writes ws (see task.UpdateMany), in one commit if the wrapped store can, and
// publishes the event of each update written that makes one.
func (s *Store) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	errs := task.UpdateMany(ctx, s.Store, ws)
	for i, err := range errs {
		if err == nil {
			s.written(ws[i].Task)
		}
	}
	return errs
}

// GetBatch reads through the wrapped store's GetBatch, or one Get after another (task.GetBatch).
func (s *Store) GetBatch(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	return task.GetBatch(ctx, s.Store, refs)
}

// AddUpstreams writes t like Update (see task.FlowStore) and publishes its event, if any.
func (s *Store) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	if err := s.Store.AddUpstreams(ctx, t, prev, from); err != nil {
		return err
	}
	s.written(t)
	return nil
}

func (s *Store) written(t task.Task) {
	if e, ok := Written(t); ok {
		s.pub.Publish(e)
	}
}

// GetState reads through the wrapped store's GetState if it has one (task.StateReader), and Get
// otherwise, so that wrapping a store keeps its cheaper reads.
func (s *Store) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	if r, ok := s.Store.(task.StateReader); ok {
		return r.GetState(ctx, lambda, id)
	}
	return s.Get(ctx, lambda, id)
}
