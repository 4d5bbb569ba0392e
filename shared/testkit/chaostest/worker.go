package chaostest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/history"
	"github.com/openatf/atf/shared/worker"
)

// Duplicating is a queue that delivers every message with 0 to 3 extra copies, and now and then
// a message for a task that has already finished.
type Duplicating struct {
	task.Queue
	mu     sync.Mutex
	sent   []task.Message
	copies int
}

// Copies is how many extra messages were sent.
func (q *Duplicating) Copies() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.copies
}

func (q *Duplicating) Send(ctx context.Context, msgs ...task.Message) error {
	var out []task.Message
	q.mu.Lock()
	for _, m := range msgs {
		for range 1 + rand.IntN(4) {
			out = append(out, m)
		}
		if len(q.sent) > 0 && rand.IntN(4) == 0 {
			out = append(out, q.sent[rand.IntN(len(q.sent))]) // most of these have finished
		}
		q.sent = append(q.sent, m)
	}
	q.copies += len(out) - len(msgs)
	q.mu.Unlock()
	return q.Queue.Send(ctx, out...)
}

// LostExtends loses the Extend calls of the messages Lose picks, as a broken path between a
// worker and its queue would: such a message, hidden while its task runs, comes back once the
// visibility its receive gave it runs out.
type LostExtends struct {
	task.Queue
	Lose func(task.Delivery) bool
	lost atomic.Int64
}

// Lost is how many Extend calls were lost.
func (q *LostExtends) Lost() int { return int(q.lost.Load()) }

func (q *LostExtends) Extend(ctx context.Context, d task.Delivery, v time.Duration) error {
	if q.Lose(d) {
		q.lost.Add(1)
		return errInjected("extend")
	}
	return q.Queue.Extend(ctx, d, v)
}

// Freezer stops a whole worker as SIGSTOP would: while it is frozen, every call into the
// wrapped store and queue, and every step of the handlers that Pass it, waits. The worker
// neither heartbeats nor reports nor makes progress; calls already sent complete on the other
// side, but their answers arrive only after Thaw, when the worker carries on as if nothing
// happened. Only the executor's clock runs on: a handler it stops during the freeze, because
// its lease is running out, ends (see Sleep).
type Freezer struct {
	mu     sync.Mutex
	thawed chan struct{} // closed by Thaw; nil while not frozen
}

// Freeze stops the worker; Thaw lets it go on.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thawed = make(chan struct{})
}

func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.thawed)
	f.thawed = nil
}

// Pass returns at once, or once thawed.
func (f *Freezer) Pass() { _ = f.PassOrStop(context.Background()) }

// PassOrStop returns at once, or once thawed, or with ctx's error once ctx ends.
func (f *Freezer) PassOrStop(ctx context.Context) error {
	f.mu.Lock()
	thawed := f.thawed
	f.mu.Unlock()
	if thawed == nil {
		return nil
	}
	select {
	case <-thawed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Store wraps s so that its calls stop while frozen.
func (f *Freezer) Store(s task.Store) task.Store { return &frozenStore{s, f} }

// Queue wraps q so that its calls stop while frozen.
func (f *Freezer) Queue(q task.Queue) task.Queue { return &frozenQueue{q, f} }

type frozenStore struct {
	task.Store
	f *Freezer
}

func pass[T any](f *Freezer, fn func() (T, error)) (T, error) {
	f.Pass()
	v, err := fn()
	f.Pass()
	return v, err
}

func (s *frozenStore) Create(ctx context.Context, t task.Task) error {
	_, err := pass(s.f, func() (struct{}, error) { return struct{}{}, s.Store.Create(ctx, t) })
	return err
}

func (s *frozenStore) CreateBatch(ctx context.Context, tasks []task.Task) error {
	_, err := pass(s.f, func() (struct{}, error) { return struct{}{}, s.Store.CreateBatch(ctx, tasks) })
	return err
}

func (s *frozenStore) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	return pass(s.f, func() (task.Task, error) { return s.Store.Get(ctx, lambda, id) })
}

func (s *frozenStore) Update(ctx context.Context, t task.Task, prev int64) error {
	_, err := pass(s.f, func() (struct{}, error) { return struct{}{}, s.Store.Update(ctx, t, prev) })
	return err
}

func (s *frozenStore) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	var next string
	tasks, err := pass(s.f, func() (tasks []task.Task, err error) {
		tasks, next, err = s.Store.List(ctx, p)
		return tasks, err
	})
	return tasks, next, err
}

func (s *frozenStore) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	return pass(s.f, func() ([]task.Task, error) { return s.Store.Due(ctx, p) })
}

func (s *frozenStore) Triggered(ctx context.Context, lambda string) (bool, error) {
	return pass(s.f, func() (bool, error) { return s.Store.Triggered(ctx, lambda) })
}

func (s *frozenStore) Gates(ctx context.Context) ([]task.Gate, error) {
	return pass(s.f, func() ([]task.Gate, error) { return s.Store.Gates(ctx) })
}

type frozenQueue struct {
	task.Queue
	f *Freezer
}

func (q *frozenQueue) Send(ctx context.Context, msgs ...task.Message) error {
	_, err := pass(q.f, func() (struct{}, error) { return struct{}{}, q.Queue.Send(ctx, msgs...) })
	return err
}

func (q *frozenQueue) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	return pass(q.f, func() ([]task.Delivery, error) { return q.Queue.Receive(ctx, p) })
}

func (q *frozenQueue) Delete(ctx context.Context, d task.Delivery) error {
	_, err := pass(q.f, func() (struct{}, error) { return struct{}{}, q.Queue.Delete(ctx, d) })
	return err
}

func (q *frozenQueue) Extend(ctx context.Context, d task.Delivery, v time.Duration) error {
	_, err := pass(q.f, func() (struct{}, error) { return struct{}{}, q.Queue.Extend(ctx, d, v) })
	return err
}

// History collects the executions of every Recorder that shares it.
type History struct {
	mu      sync.Mutex
	execs   []history.Execution
	running map[string]map[string]int // runs in progress, by worker and task
}

// Running is how many runs of worker are in progress.
func (h *History) Running(worker string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, runs := range h.running[worker] {
		n += runs
	}
	return n
}

// RunningTasks returns the tasks worker is running.
func (h *History) RunningTasks(worker string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id := range h.running[worker] {
		ids = append(ids, id)
	}
	return ids
}

func (h *History) started(worker, id string, by int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == nil {
		h.running = map[string]map[string]int{}
	}
	if h.running[worker] == nil {
		h.running[worker] = map[string]int{}
	}
	if h.running[worker][id] += by; h.running[worker][id] == 0 {
		delete(h.running[worker], id)
	}
}

// Executions returns a copy of what was recorded so far.
func (h *History) Executions() []history.Execution {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]history.Execution(nil), h.execs...)
}

// Recorder is a Go handler that records each of its runs in History under the name of its
// Worker, and returns {"worker": Worker, "attempt": n} so a test can tell whose result stood. Work is what
// a run does (nothing if nil); its error is the run's.
type Recorder struct {
	History *History
	Worker  string
	Work    func(ctx context.Context, t worker.Task) error
}

// Result is what a Recorder returns.
type Result struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

func (r *Recorder) Handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	e := history.Execution{Task: t.ID, Attempt: t.Attempt, Worker: r.Worker, Start: time.Now()}
	r.History.started(r.Worker, t.ID, 1)
	defer r.History.started(r.Worker, t.ID, -1)
	var err error
	if r.Work != nil {
		err = r.Work(ctx, t)
	}
	e.End, e.Outcome = time.Now(), "success"
	switch {
	case ctx.Err() != nil:
		e.Outcome = "cancelled"
	case err != nil:
		e.Outcome = "error"
	}
	r.History.mu.Lock()
	r.History.execs = append(r.History.execs, e)
	r.History.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return json.Marshal(Result{Worker: r.Worker, Attempt: t.Attempt})
}

// Sleep is Work that takes d in 10 ms steps, or until cancelled. Each step first Passes f (if
// not nil), so the time a worker spends frozen does not count: it has as much left to do
// after Thaw as before Freeze. A run cancelled while frozen ends at once: its executor, whose
// clock the freeze does not stop, gave up its lease.
func Sleep(d time.Duration, f *Freezer) func(context.Context, worker.Task) error {
	const step = 10 * time.Millisecond
	return func(ctx context.Context, _ worker.Task) error {
		for range d / step {
			if f != nil {
				if err := f.PassOrStop(ctx); err != nil {
					return err
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(step):
			}
		}
		return nil
	}
}
