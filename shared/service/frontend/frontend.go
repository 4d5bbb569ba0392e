// Package frontend is what clients call: schedule, get, list and cancel tasks, set gates, and see
// the lambdas. It validates every request before it touches the store, so a rejected request
// changes nothing. The HTTP API (package httpapi) is a thin layer over it.
package frontend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// Config configures a Service. Zero fields take defaults.
type Config struct {
	// Lambdas are the lambdas the service knows; one it does not list is refused as unknown
	// (task.ErrNotFound), and an error of it answers the request (task.ErrUnavailable).
	Lambdas task.Catalog
	Task    task.Config
	Now     func() time.Time
	// Notify is called after a task is scheduled or a gate is set, so a local consumer can sweep
	// at once instead of at its next poll.
	Notify func()
	// Changes, if set, wakes Wait when a task ends. Without it Wait polls the store, at
	// WaitPollFirst, then twice as long each time up to WaitPollMax.
	Changes Changes
	// MaxWait bounds Wait; MaxWait (the constant) if zero. Tests make it short.
	MaxWait                    time.Duration
	WaitPollFirst, WaitPollMax time.Duration // DefaultWaitPollFirst and DefaultWaitPollMax if zero
	// Queue, if set, is where Schedule sends the tasks due within task.MaxSendAhead itself
	// (see ahead.go). Without it the consumer enqueues every task.
	Queue task.Queue
	// SendFirst sends those tasks' messages before it writes them, with a nonce the create
	// carries, and gives them no resend trigger (ahead.go, createSentFirst). Only for an
	// environment whose workers and status function all forward and bury nonces: a worker built
	// before them drops a message that comes before its task's create, with no trigger left.
	// Off, the tasks are written first, with their resend trigger, then sent.
	SendFirst bool
	// Gates, if set, is the snapshot of the gates that the schedule path reads (see ahead.go),
	// shared with the claims of the same process (status.Config.Gates): SetGate invalidates it,
	// so that both see a gate at once. Nil: a snapshot of the Service's own.
	Gates *task.GateSnapshot
	// Logger is slog.Default() if nil.
	Logger *slog.Logger
	// Feed, if set, is the live feed of this process's lifecycle events that Events reads (atf
	// dev). Without it, as on AWS, Events answers ErrNoFeed.
	Feed *lifecycle.Feed
}

// Changes tells waiters when a task ends, so that Wait sleeps instead of polling the store.
// taskend.Store implements it for a store that one process alone writes.
type Changes interface {
	// Watch returns a channel closed when the task lambda/id is next written with a terminal
	// status, and stop, to call once done waiting.
	Watch(lambda, id string) (ended <-chan struct{}, stop func())
}

// MaxWait is the longest Wait: a longer one is cut to it. On AWS, API Gateway gives up on the API
// function after 29 s (its integration timeout), so 25 s leaves the function time to answer.
const MaxWait = 25 * time.Second

// Without Changes, Wait polls the store after DefaultWaitPollFirst, then after twice as long
// each time, up to DefaultWaitPollMax: a 25 s wait reads the task at most 29 times (see
// docs/capacity.md, "Waiting for a result").
const (
	DefaultWaitPollFirst = 100 * time.Millisecond
	DefaultWaitPollMax   = time.Second
)

// waitMargin is what Wait leaves before its context's deadline (the API function's own timeout)
// to read the task and answer.
const waitMargin = time.Second

// Service implements the client-facing operations.
type Service struct {
	store   task.Store
	lambdas task.Catalog
	cfg     task.Config
	now     func() time.Time
	notify  func()
	changes Changes
	maxWait time.Duration
	// pollFirst and pollMax pace Wait's reads without changes.
	pollFirst, pollMax time.Duration
	queue              task.Queue
	sendFirst          bool
	admission          admission
	log                *slog.Logger
	feed               *lifecycle.Feed
}

// New returns a Service over store.
func New(store task.Store, c Config) *Service {
	s := &Service{
		store: store, lambdas: c.Lambdas, cfg: c.Task.WithDefaults(), now: c.Now, notify: c.Notify,
		changes: c.Changes, maxWait: cmp.Or(c.MaxWait, MaxWait),
		pollFirst: cmp.Or(c.WaitPollFirst, DefaultWaitPollFirst), pollMax: cmp.Or(c.WaitPollMax, DefaultWaitPollMax),
		queue: c.Queue, sendFirst: c.SendFirst, log: cmp.Or(c.Logger, slog.Default()), feed: c.Feed,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.notify == nil {
		s.notify = func() {}
	}
	s.admission.gates = c.Gates
	if s.admission.gates == nil {
		s.admission.gates = &task.GateSnapshot{Store: store, Age: SnapshotAge}
	}
	if s.lambdas == nil {
		s.lambdas = task.FixedCatalog(nil)
	}
	return s
}

// PayloadLimit is the largest payload a task may carry, in bytes.
func (s *Service) PayloadLimit() int { return s.cfg.PayloadLimit }

// lambda returns the lambda called name: task.ErrNotFound if the catalog does not list it (never
// registered, or removed since), so that nothing new is made for it.
func (s *Service) lambda(ctx context.Context, name string) (task.Lambda, error) {
	l, ok, err := s.lambdas.Lambda(ctx, name)
	if err != nil {
		return task.Lambda{}, err
	}
	if !ok {
		return task.Lambda{}, task.Errorf(task.ErrNotFound, "lambda %q is not registered%s", task.Echo(name), s.registered(ctx))
	}
	return l, nil
}

// maxNamedLambdas is how many registered lambdas the error of an unknown one names at most.
const maxNamedLambdas = 20

// registered names the registered lambdas, to add to the error of an unknown one: the first
// maxNamedLambdas by name, and how many more. The catalog serves them as it serves one lambda (on
// AWS, from what it read within its MaxAge); if it cannot, the error goes without them.
func (s *Service) registered(ctx context.Context) string {
	ls, err := s.lambdas.Lambdas(ctx)
	switch {
	case err != nil:
		return ""
	case len(ls) == 0:
		return "; no lambda is registered"
	}
	names := make([]string, min(len(ls), maxNamedLambdas))
	for i := range names {
		names[i] = ls[i].Name
	}
	list := "; the registered ones: " + strings.Join(names, ", ")
	if more := len(ls) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return list
}

// Schedule creates a task. Scheduling is idempotent on the task id: the same request again
// returns the stored task with created false; a different request with a taken id fails with
// task.ErrConflict.
func (s *Service) Schedule(ctx context.Context, lambda string, spec task.Spec) (t task.Task, created bool, err error) {
	l, err := s.lambda(ctx, lambda)
	if err != nil {
		return task.Task{}, false, err
	}
	now := s.now().UTC()
	t, err = task.New(spec, l, now, s.cfg)
	if err != nil {
		return task.Task{}, false, err
	}
	var ups []task.Task // to mark once t exists
	if t.AfterCount > 0 {
		if ups, err = s.linkUpstreams(ctx, []task.Task{t}); err != nil {
			return task.Task{}, false, err
		}
	}
	one := []task.Task{t}
	ahead, err := s.createSentFirst(ctx, one, now, func(one []task.Task) error { return s.store.Create(ctx, one[0]) })
	t = one[0]
	switch {
	case errors.Is(err, task.ErrExists):
		// A replay: its message, sent first, is one too many, which the claim drops.
		old, err := s.store.Get(ctx, lambda, t.ID)
		if err != nil {
			return task.Task{}, false, err
		}
		if old.Spec != t.Spec {
			return task.Task{}, false, task.Errorf(task.ErrConflict, "task %q already exists with a different request", t.ID)
		}
		return old, false, nil
	case err != nil:
		return task.Task{}, false, err
	}
	s.markDownstream(ctx, ups)
	if ahead == 0 {
		s.notify()
	}
	t.Nonce = ""
	return t, true, nil
}

// ScheduleBatch creates up to task.MaxBatch tasks of one lambda, all or none: a request that is
// wrong anywhere changes nothing, and its error names the task by its index. Like Schedule it is
// idempotent: the same batch again returns the stored tasks with created false. A batch that
// reuses a taken id with a different request, or mixes new tasks with existing ones, fails with
// task.ErrConflict.
//
// A batch is a graph when its tasks wait for each other (After names a task of the batch) or for
// existing tasks; its tasks may belong to other lambdas than lambda (task.Spec.Lambda). A cycle,
// or an upstream that is neither in the batch nor stored, fails the batch with task.ErrInvalid.
func (s *Service) ScheduleBatch(ctx context.Context, lambda string, specs []task.Spec) (tasks []task.Task, created bool, err error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return nil, false, err
	}
	if len(specs) == 0 || len(specs) > task.MaxBatch {
		return nil, false, task.Errorf(task.ErrInvalid, "a batch holds 1 to %d tasks, got %d", task.MaxBatch, len(specs))
	}
	now := s.now().UTC()
	tasks = make([]task.Task, len(specs))
	flow := false
	for i, spec := range specs {
		l, err := s.batchLambda(ctx, lambda, spec)
		if err == nil {
			tasks[i], err = task.New(spec, l, now, s.cfg)
		}
		if err != nil {
			return nil, false, fmt.Errorf("tasks[%d]: %w", i, err)
		}
		flow = flow || tasks[i].AfterCount > 0
	}
	if err := task.CheckBatch(tasks); err != nil {
		return nil, false, err
	}
	var ups []task.Task // outside the batch, to mark once the batch exists
	if flow {
		if ups, err = s.linkUpstreams(ctx, tasks); err != nil {
			return nil, false, err
		}
	}
	ahead, err := s.createSentFirst(ctx, tasks, now, func(tasks []task.Task) error { return s.store.CreateBatch(ctx, tasks) })
	switch {
	case errors.Is(err, task.ErrExists):
		return s.replayBatch(ctx, tasks) // its messages, sent first, are too many: the claims drop them
	case err != nil:
		return nil, false, err
	}
	s.markDownstream(ctx, ups)
	if ahead < len(tasks) {
		s.notify()
	}
	for i := range tasks {
		tasks[i].Nonce = ""
	}
	return tasks, true, nil
}

// replayBatch answers a batch whose ids are taken: with the stored tasks if every one of them was
// created by the same request (a client's retry), and task.ErrConflict otherwise.
//
// It reads the stored tasks in one GetMany: one call for the batch, not a read per task.
func (s *Service) replayBatch(ctx context.Context, tasks []task.Task) ([]task.Task, bool, error) {
	refs := make([]task.Ref, len(tasks))
	for i, t := range tasks {
		refs[i] = t.Ref()
	}
	stored, err := s.store.GetMany(ctx, refs)
	if err != nil {
		return nil, false, err
	}
	for i, t := range tasks {
		old := stored[i]
		if old.ID == "" {
			return nil, false, task.Errorf(task.ErrConflict, "some tasks of the batch exist and task %q does not: no task of the batch was created", t.ID)
		}
		if old.Spec != t.Spec {
			return nil, false, task.Errorf(task.ErrConflict, "tasks[%d]: task %q already exists with a different request", i, t.ID)
		}
		// The same request, so the same payload and upstreams, which GetMany leaves out.
		old.Payload, old.After = t.Payload, t.After
		stored[i] = old
	}
	return stored, false, nil
}

// Get returns one task.
func (s *Service) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return task.Task{}, err
	}
	t, err := s.store.Get(ctx, lambda, id)
	if errors.Is(err, task.ErrNotFound) {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", task.Echo(id), lambda)
	}
	if err != nil {
		return task.Task{}, err
	}
	one := []task.Task{t}
	s.markHeld(ctx, one)
	return one[0], nil
}

// markHeld sets HeldBy on the tasks a paused gate keeps from running, from the gates as the
// schedule path reads them: at most one read of the gates per SnapshotAge, whatever the number
// of tasks. A task answered while its gate is being set may say what the gate was a moment ago.
// If the gates cannot be read, the tasks are answered without it: it explains, it decides
// nothing.
func (s *Service) markHeld(ctx context.Context, tasks []task.Task) {
	var gates []task.Gate
	read := false
	for i, t := range tasks {
		if !t.Status.Gated() {
			continue
		}
		if !read {
			var err error
			if gates, err = s.admission.gates.At(ctx, s.now().UTC()); err != nil {
				s.log.Debug("frontend: no gates to tell held tasks by", "err", err)
				return
			}
			read = true
		}
		if g, ok := task.DecidingGate(gates, t.Lambda, t.Collection); ok && g.Mode == task.GatePause {
			tasks[i].HeldBy = &g
		}
	}
}

// Attempts returns a task's history: its latest task.MaxHistory attempts and how many before
// them were dropped.
func (s *Service) Attempts(ctx context.Context, lambda, id string) (task.History, error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return task.History{}, err
	}
	h, err := s.store.Attempts(ctx, lambda, id)
	if errors.Is(err, task.ErrNotFound) {
		return task.History{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", task.Echo(id), lambda)
	}
	return h, err
}

// MaxWait is the longest wait Wait takes; a longer one is cut to it.
func (s *Service) MaxWait() time.Duration { return s.maxWait }

// Wait returns a task once it is terminal, or as it stands after d (at most MaxWait, and ending a
// second before ctx's deadline, so that the answer is in time). It reads the task, then sleeps
// until Changes says it ended; without Changes it reads it again after 100 ms, then twice as
// long each time, up to 1 s, with the store's cheaper state read if it has one. It returns
// ctx's error if ctx ends first.
func (s *Service) Wait(ctx context.Context, lambda, id string, d time.Duration) (task.Task, error) {
	if d < 0 {
		return task.Task{}, task.Errorf(task.ErrInvalid, "a wait must not be negative, got %s", d)
	}
	d = min(d, s.maxWait)
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)-waitMargin)
	}
	if d <= 0 {
		return s.Get(ctx, lambda, id)
	}
	if _, err := s.lambda(ctx, lambda); err != nil {
		return task.Task{}, err
	}
	end := time.Now().Add(d)
	if s.changes != nil {
		return s.waitChanges(ctx, lambda, id, end)
	}
	return s.waitPolling(ctx, lambda, id, end)
}

// waitChanges sleeps until the task ends, as Changes tells.
func (s *Service) waitChanges(ctx context.Context, lambda, id string, end time.Time) (task.Task, error) {
	for {
		// Watch before the read: an end written after the read still wakes this waiter.
		ended, stop := s.changes.Watch(lambda, id)
		t, err := s.Get(ctx, lambda, id)
		if err != nil || t.Status.Terminal() {
			stop()
			return t, err
		}
		woken, err := sleep(ctx, ended, time.Until(end))
		stop()
		if err != nil {
			return task.Task{}, err
		}
		if !woken { // the wait is over: answer the task as it stands now, not as first read
			return s.Get(ctx, lambda, id)
		}
	}
}

// waitPolling reads the task's state until it ends, backing off, then answers the whole task.
func (s *Service) waitPolling(ctx context.Context, lambda, id string, end time.Time) (task.Task, error) {
	read := s.store.Get
	if r, ok := s.store.(task.StateReader); ok {
		read = r.GetState // polls need the status only; the answer reads the payload once
	}
	for interval := s.pollFirst; ; interval = min(2*interval, s.pollMax) {
		t, err := read(ctx, lambda, id)
		if errors.Is(err, task.ErrNotFound) {
			return s.Get(ctx, lambda, id) // its error names the task
		}
		if err != nil {
			return task.Task{}, err
		}
		if t.Status.Terminal() {
			break
		}
		// The last sleep ends with the wait, and the answer's read follows it.
		left := time.Until(end)
		if _, err := sleep(ctx, nil, min(interval, left)); err != nil {
			return task.Task{}, err
		}
		if left <= interval {
			break
		}
	}
	return s.Get(ctx, lambda, id)
}

// sleep waits for d, a close of wake, or the end of ctx, and reports whether wake closed.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) (woken bool, err error) {
	if d <= 0 {
		return false, nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-wake:
		return true, nil
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// List returns a page of a lambda's tasks.
func (s *Service) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	if _, err := s.lambda(ctx, p.Lambda); err != nil {
		return nil, "", err
	}
	for _, st := range p.StatusSet() {
		if !st.Valid() {
			return nil, "", task.Errorf(task.ErrInvalid, "status %q is not one of %v", task.Echo(string(st)), task.Statuses)
		}
	}
	if p.Limit < 0 || p.Limit > task.MaxListLimit {
		return nil, "", task.Errorf(task.ErrInvalid, "limit must be in 1..%d, got %d", task.MaxListLimit, p.Limit)
	}
	if p.Collection != "" {
		// No task is of such a collection: say so rather than answer an empty page.
		if err := task.ValidateID("collection", p.Collection); err != nil {
			return nil, "", err
		}
	}
	tasks, next, err := s.store.List(ctx, p)
	if err == nil {
		s.markHeld(ctx, tasks)
	}
	return tasks, next, err
}

// Cancel cancels a task: one that has not started ends cancelled; a running one is marked for
// cancellation and ends cancelled once its executor has stopped it (see cancel.go).
func (s *Service) Cancel(ctx context.Context, lambda, id string) (task.Task, error) {
	if _, err := s.Get(ctx, lambda, id); err != nil {
		return task.Task{}, err
	}
	t, _, err := s.cancel(ctx, lambda, id)
	return t, err
}

// SetGate opens, pauses or drops a lambda, or one collection of it.
func (s *Service) SetGate(ctx context.Context, g task.Gate) (task.Gate, error) {
	if _, err := s.lambda(ctx, g.Lambda); err != nil {
		return task.Gate{}, err
	}
	if g.Mode != task.GateOpen && g.Mode != task.GatePause && g.Mode != task.GateDrop {
		return task.Gate{}, task.Errorf(task.ErrInvalid, "gate mode %q is not one of open, pause, drop", task.Echo(g.Mode))
	}
	if g.Collection != "" {
		if err := task.ValidateID("collection", g.Collection); err != nil {
			return task.Gate{}, err
		}
	}
	g.UpdatedAt = s.now().UTC()
	err := s.store.SetGate(ctx, g)
	s.admission.gates.Invalidate() // even on an error: the write may have gone through
	if err != nil {
		return task.Gate{}, err
	}
	s.notify()
	return g, nil
}

// Lambdas lists the registered lambdas with their gates that are not open, and their task
// counts by status.
func (s *Service) Lambdas(ctx context.Context) ([]task.LambdaInfo, error) {
	gates, err := s.store.Gates(ctx)
	if err != nil {
		return nil, err
	}
	lambdas, err := s.lambdas.Lambdas(ctx)
	if err != nil {
		return nil, err
	}
	infos := make([]task.LambdaInfo, 0, len(lambdas))
	for _, l := range lambdas {
		name := l.Name
		counts, err := s.store.Counts(ctx, name)
		if err != nil {
			return nil, err
		}
		info := task.LambdaInfo{Name: name, Priorities: l.Priorities, Gates: []task.Gate{}, Counts: counts}
		for _, g := range gates {
			if g.Lambda == name {
				info.Gates = append(info.Gates, g)
			}
		}
		infos = append(infos, info)
	}
	return infos, nil
}
