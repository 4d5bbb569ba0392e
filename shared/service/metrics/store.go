package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// Store is a task.Store that records the transitions of its successful writes (Create,
// CreateBatch, FireSchedule, Update, AddUpstreams, Redrive), the delivery latency of the claims among them, and
// its calls' errors of the store's own (Kind). It adds no store call.
type Store struct {
	task.Store
	rec Recorder
}

var _ task.Store = (*Store)(nil)

// Wrap returns s recording to rec.
func Wrap(s task.Store, rec Recorder) *Store { return &Store{Store: s, rec: rec} }

// KindOf returns the Kind of a store call's error, and false for no error or for one that is an
// answer rather than a failure: not found, exists, a conflict, a stale lease, bad input, a
// start held by a limit, a caller that gave up (context.Canceled).
func KindOf(err error) (Kind, bool) {
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, task.ErrThrottled):
		return KindThrottled, true
	case errors.Is(err, task.ErrStorageFull):
		return KindStorageFull, true
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout, true
	case errors.Is(err, context.Canceled), errors.Is(err, task.ErrNotFound), errors.Is(err, task.ErrExists),
		errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrStaleLease), errors.Is(err, task.ErrInvalid),
		errors.Is(err, task.ErrTooLarge), errors.Is(err, task.ErrNotDue), errors.Is(err, task.ErrCancelled),
		errors.Is(err, task.ErrBuried), errors.Is(err, task.ErrHeld):
		return "", false
	}
	return KindOther, true
}

// StoreOps are the ops Store records errors of (its check calls), so that a Recorder can show
// every op's count from the start, at zero: a method that Store comes to check goes here too.
var StoreOps = []string{
	"AddEdges", "AddUpstreams", "Bury", "Counts", "Create", "CreateBatch", "CreateSchedule", "DeleteSchedule",
	"Downstreams", "Due", "DueSchedules", "FireSchedule", "Gates", "Get", "GetBatch", "GetMany",
	"GetSchedule", "GetState", "List", "ListFailed", "ListSchedules", "Redrive", "SetGate", "Triggered", "Update",
	"UpdateMany", "UpdateSchedule", "Upstreams",
}

// check records err, if it is a store error, as one of op's, and returns it.
func (s *Store) check(op string, err error) error {
	if kind, ok := KindOf(err); ok {
		s.rec.StoreError(op, kind)
	}
	return err
}

// written records the transition of a successful write of t.
func (s *Store) written(t task.Task) {
	if t.From == "" || t.From == t.Status {
		return // a heartbeat, a park, a task written as read: no transition
	}
	var event lifecycle.Type
	if e, ok := lifecycle.Written(t); ok {
		event = e.Type
	}
	s.rec.Transitions(t.Lambda, t.From, t.Status, event, 1)
	if t.From == task.StatusEnqueued && (t.Status == task.StatusProcessing || t.Status == task.StatusClaimed) && t.Attempts == 1 {
		// The claim of a first attempt (task.Claim): how late after its run time it started, as
		// status.Controller.Claim logs it.
		s.rec.Delivery(t.Lambda, max(t.UpdatedAt.Sub(t.RunAt), 0))
	}
}

// Create stores t (see task.Store) and records its creation.
func (s *Store) Create(ctx context.Context, t task.Task) error {
	ctx = WithLambda(ctx, t.Lambda)
	if err := s.check("Create", s.Store.Create(ctx, t)); err != nil {
		return err
	}
	s.rec.Transitions(t.Lambda, "", t.Status, lifecycle.Scheduled, 1)
	return nil
}

// Bury records a message that found no task (see task.Store).
func (s *Store) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	return s.check("Bury", s.Store.Bury(ctx, lambda, id, nonce, until))
}

// CreateBatch stores tasks (see task.Store) and records their creation, once per lambda and status.
func (s *Store) CreateBatch(ctx context.Context, tasks []task.Task) error {
	ctx = WithLambda(ctx, lambdaOf(len(tasks), func(i int) string { return tasks[i].Lambda }))
	if err := s.check("CreateBatch", s.Store.CreateBatch(ctx, tasks)); err != nil {
		return err
	}
	s.created(tasks)
	return nil
}

// FireSchedule makes a schedule's firings (see task.ScheduleStore) and records the creation of
// the tasks it created, as CreateBatch does.
func (s *Store) FireSchedule(ctx context.Context, sc task.Schedule, prev int64, tasks []task.Task) ([]bool, error) {
	ctx = WithLambda(ctx, sc.Lambda)
	created, err := s.Store.FireSchedule(ctx, sc, prev, tasks)
	if err := s.check("FireSchedule", err); err != nil {
		return nil, err
	}
	var made []task.Task
	for i, t := range tasks {
		if created[i] {
			made = append(made, t)
		}
	}
	s.created(made)
	return created, nil
}

// created records the creation of tasks, once per lambda and status.
func (s *Store) created(tasks []task.Task) {
	type key struct {
		lambda string
		status task.Status
	}
	created := map[key]int{}
	var order []key
	for _, t := range tasks {
		k := key{t.Lambda, t.Status}
		if created[k] == 0 {
			order = append(order, k)
		}
		created[k]++
	}
	for _, k := range order {
		s.rec.Transitions(k.lambda, "", k.status, lifecycle.Scheduled, created[k])
	}
}

// Update writes t (see task.Store) and records its transition.
func (s *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	ctx = WithLambda(ctx, t.Lambda)
	if err := s.check("Update", s.Store.Update(ctx, t, prev)); err != nil {
		var held *task.Held
		if errors.As(err, &held) {
			s.rec.Held(t.Lambda, held.Limit)
		}
		return err
	}
	s.written(t)
	return nil
}

// Unwrap returns the store that s wraps (see task.Batched).
func (s *Store) Unwrap() task.Store { return s.Store }

// UpdateMany writes ws (see task.UpdateMany), in one commit if the wrapped store can, and
// records the transition of each update written.
func (s *Store) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	ctx = WithLambda(ctx, lambdaOf(len(ws), func(i int) string { return ws[i].Task.Lambda }))
	errs := task.UpdateMany(ctx, s.Store, ws)
	for i, err := range errs {
		if errs[i] = s.check("UpdateMany", err); err == nil {
			s.written(ws[i].Task)
		}
	}
	return errs
}

// GetBatch reads through the wrapped store's GetBatch, or one Get after another (task.GetBatch).
func (s *Store) GetBatch(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	ctx = WithLambda(ctx, lambdaOf(len(refs), func(i int) string { return refs[i].Lambda }))
	tasks, err := task.GetBatch(ctx, s.Store, refs)
	return tasks, s.check("GetBatch", err)
}

// AddUpstreams writes t (see task.FlowStore) and records its transition.
func (s *Store) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	ctx = WithLambda(ctx, t.Lambda)
	if err := s.check("AddUpstreams", s.Store.AddUpstreams(ctx, t, prev, from)); err != nil {
		return err
	}
	s.written(t)
	return nil
}

// Redrive writes t (see task.RedriveStore) and records its transition.
func (s *Store) Redrive(ctx context.Context, t task.Task, prev int64) error {
	ctx = WithLambda(ctx, t.Lambda)
	if err := s.check("Redrive", s.Store.Redrive(ctx, t, prev)); err != nil {
		return err
	}
	s.written(t)
	return nil
}

// GetState reads through the wrapped store's GetState if it has one (task.StateReader), and Get
// otherwise, so that wrapping a store keeps its cheaper reads.
func (s *Store) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	ctx = WithLambda(ctx, lambda)
	if r, ok := s.Store.(task.StateReader); ok {
		t, err := r.GetState(ctx, lambda, id)
		return t, s.check("GetState", err)
	}
	return s.Get(ctx, lambda, id)
}

// The other calls only count their errors.

func (s *Store) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	ctx = WithLambda(ctx, lambda)
	t, err := s.Store.Get(ctx, lambda, id)
	return t, s.check("Get", err)
}

func (s *Store) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	ctx = WithLambda(ctx, p.Lambda)
	tasks, next, err := s.Store.List(ctx, p)
	return tasks, next, s.check("List", err)
}

func (s *Store) ListFailed(ctx context.Context, p task.FailedParams) ([]task.Task, string, error) {
	tasks, next, err := s.Store.ListFailed(ctx, p)
	return tasks, next, s.check("ListFailed", err)
}

func (s *Store) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	ctx = WithLambda(ctx, p.Lambda)
	tasks, err := s.Store.Due(ctx, p)
	return tasks, s.check("Due", err)
}

func (s *Store) Triggered(ctx context.Context, lambda string) (bool, error) {
	ctx = WithLambda(ctx, lambda)
	found, err := s.Store.Triggered(ctx, lambda)
	return found, s.check("Triggered", err)
}

func (s *Store) Counts(ctx context.Context, lambda string) (map[task.Status]int, error) {
	ctx = WithLambda(ctx, lambda)
	n, err := s.Store.Counts(ctx, lambda)
	return n, s.check("Counts", err)
}

func (s *Store) SetGate(ctx context.Context, g task.Gate) error {
	ctx = WithLambda(ctx, g.Lambda)
	return s.check("SetGate", s.Store.SetGate(ctx, g))
}

func (s *Store) Gates(ctx context.Context) ([]task.Gate, error) {
	g, err := s.Store.Gates(ctx)
	return g, s.check("Gates", err)
}

func (s *Store) CreateSchedule(ctx context.Context, sc task.Schedule) error {
	ctx = WithLambda(ctx, sc.Lambda)
	return s.check("CreateSchedule", s.Store.CreateSchedule(ctx, sc))
}

func (s *Store) GetSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	ctx = WithLambda(ctx, lambda)
	sc, err := s.Store.GetSchedule(ctx, lambda, id)
	return sc, s.check("GetSchedule", err)
}

func (s *Store) ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]task.Schedule, string, error) {
	ctx = WithLambda(ctx, lambda)
	scs, next, err := s.Store.ListSchedules(ctx, lambda, cursor, limit)
	return scs, next, s.check("ListSchedules", err)
}

func (s *Store) UpdateSchedule(ctx context.Context, sc task.Schedule, prev int64) error {
	ctx = WithLambda(ctx, sc.Lambda)
	return s.check("UpdateSchedule", s.Store.UpdateSchedule(ctx, sc, prev))
}

func (s *Store) DeleteSchedule(ctx context.Context, lambda, id string) error {
	ctx = WithLambda(ctx, lambda)
	return s.check("DeleteSchedule", s.Store.DeleteSchedule(ctx, lambda, id))
}

func (s *Store) DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]task.Schedule, error) {
	ctx = WithLambda(ctx, lambda)
	scs, err := s.Store.DueSchedules(ctx, lambda, before, limit)
	return scs, s.check("DueSchedules", err)
}

func (s *Store) AddEdges(ctx context.Context, edges []task.Edge) error {
	ctx = WithLambda(ctx, lambdaOf(len(edges), func(i int) string { return edges[i].Down.Lambda }))
	return s.check("AddEdges", s.Store.AddEdges(ctx, edges))
}

func (s *Store) Downstreams(ctx context.Context, up task.Ref, cursor string, limit int) ([]task.Edge, string, error) {
	ctx = WithLambda(ctx, up.Lambda)
	edges, next, err := s.Store.Downstreams(ctx, up, cursor, limit)
	return edges, next, s.check("Downstreams", err)
}

func (s *Store) Upstreams(ctx context.Context, down task.Ref, from, limit int) ([]task.Ref, error) {
	ctx = WithLambda(ctx, down.Lambda)
	refs, err := s.Store.Upstreams(ctx, down, from, limit)
	return refs, s.check("Upstreams", err)
}

func (s *Store) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	ctx = WithLambda(ctx, lambdaOf(len(refs), func(i int) string { return refs[i].Lambda }))
	tasks, err := s.Store.GetMany(ctx, refs)
	return tasks, s.check("GetMany", err)
}
