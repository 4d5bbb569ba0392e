// Package chaostest breaks atf on purpose, for the chaos scenarios of the guarantees (see
// docs/guarantees.md): stores that fail, lie or lose heartbeats, queues that duplicate, a switch
// that freezes a whole worker, and handlers that record what they ran in a shared history.
// Each wrapper is backend-agnostic, so one scenario runs on the embedded store and on DynamoDB
// and SQS alike.
package chaostest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
)

// errInjected is what a fault looks like to callers: throttling, the error every caller must
// already survive.
func errInjected(op string) error {
	return task.Errorf(task.ErrThrottled, "injected fault in %s", op)
}

// FaultyStore fails a share (Rate) of its calls. Half the faults come before the call, so
// nothing happened; half after a write went through, so the caller cannot tell whether it did.
type FaultyStore struct {
	task.Store
	Rate   float64
	faults atomic.Int64
}

// Faults is how many faults were injected.
func (s *FaultyStore) Faults() int { return int(s.faults.Load()) }

func (s *FaultyStore) roll() bool {
	if rand.Float64() < s.Rate/2 {
		s.faults.Add(1)
		return true
	}
	return false
}

// write runs a write between two chances to fail.
func (s *FaultyStore) write(op string, fn func() error) error {
	if s.roll() {
		return errInjected(op)
	}
	if err := fn(); err != nil {
		return err
	}
	if s.roll() {
		return errInjected(op)
	}
	return nil
}

func (s *FaultyStore) Create(ctx context.Context, t task.Task) error {
	return s.write("create", func() error { return s.Store.Create(ctx, t) })
}

func (s *FaultyStore) CreateBatch(ctx context.Context, tasks []task.Task) error {
	return s.write("create batch", func() error { return s.Store.CreateBatch(ctx, tasks) })
}

func (s *FaultyStore) Update(ctx context.Context, t task.Task, prev int64) error {
	return s.write("update", func() error { return s.Store.Update(ctx, t, prev) })
}

func (s *FaultyStore) SetGate(ctx context.Context, g task.Gate) error {
	return s.write("set gate", func() error { return s.Store.SetGate(ctx, g) })
}

func (s *FaultyStore) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	if s.roll() || s.roll() {
		return task.Task{}, errInjected("get")
	}
	return s.Store.Get(ctx, lambda, id)
}

func (s *FaultyStore) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	if s.roll() || s.roll() {
		return nil, "", errInjected("list")
	}
	return s.Store.List(ctx, p)
}

func (s *FaultyStore) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if s.roll() || s.roll() {
		return nil, errInjected("due")
	}
	return s.Store.Due(ctx, p)
}

func (s *FaultyStore) Triggered(ctx context.Context, lambda string) (bool, error) {
	if s.roll() || s.roll() {
		return false, errInjected("triggered")
	}
	return s.Store.Triggered(ctx, lambda)
}

func (s *FaultyStore) Gates(ctx context.Context) ([]task.Gate, error) {
	if s.roll() || s.roll() {
		return nil, errInjected("gates")
	}
	return s.Store.Gates(ctx)
}

// StaleStore answers with an earlier answer to the same query, up to MaxAge old, every other
// time it holds one that has gone stale (lists a task that has moved on since): a due index that
// lags the table, as a DynamoDB GSI may. Every move the consumer makes from such an answer must be
// refused. Choosing only answers that differ, rather than any earlier one at random, makes a stale
// answer certain whenever two due reads fall within MaxAge, however slow the machine runs.
type StaleStore struct {
	task.Store
	MaxAge time.Duration
	mu     sync.Mutex
	seen   map[string][]answer
	skip   bool // the last stale chance was taken: let the next one answer fresh
	stale  atomic.Int64
}

type answer struct {
	at    time.Time
	tasks []task.Task
}

// Stale is how many stale entries were returned: tasks the index no longer lists as they were.
func (s *StaleStore) Stale() int { return int(s.stale.Load()) }

func (s *StaleStore) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	fresh, err := s.Store.Due(ctx, p)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprint(p.Lambda, p.Priority, p.Statuses, p.Limit, p.SkipCollections)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string][]answer{}
	}
	past := slices.DeleteFunc(s.seen[key], func(a answer) bool { return now.Sub(a.at) > s.MaxAge })
	s.seen[key] = append(past, answer{now, fresh})
	current := make(map[string]int64, len(fresh))
	for _, t := range fresh {
		current[t.ID] = t.Version
	}
	for _, old := range past { // oldest first: the stalest answer
		moved := 0
		for _, t := range old.tasks {
			if v, ok := current[t.ID]; !ok || v != t.Version {
				moved++
			}
		}
		if moved == 0 {
			continue
		}
		if s.skip = !s.skip; !s.skip {
			return fresh, nil
		}
		s.stale.Add(int64(moved))
		return slices.Clone(old.tasks), nil
	}
	return fresh, nil
}

// HeartbeatLoss loses every heartbeat of the runs Lose picks (the first write to processing,
// the claim that starts the run, goes through), the way a broken network path between a worker
// and the store would. The worker must stop such a run, since it can no longer show that it
// owns the task.
type HeartbeatLoss struct {
	task.Store
	Lose    func(task.Task) bool
	mu      sync.Mutex
	started map[string]bool // leases whose run has started
	lost    map[string]int  // heartbeats lost, by task
}

// Lost returns how many heartbeats were lost, by task id.
func (s *HeartbeatLoss) Lost() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.lost)
}

func (s *HeartbeatLoss) Update(ctx context.Context, t task.Task, prev int64) error {
	if t.Status != task.StatusProcessing || !s.Lose(t) {
		return s.Store.Update(ctx, t, prev)
	}
	s.mu.Lock()
	if s.started == nil {
		s.started, s.lost = map[string]bool{}, map[string]int{}
	}
	if s.started[t.Lease] {
		s.lost[t.ID]++
		s.mu.Unlock()
		return errInjected("heartbeat")
	}
	s.mu.Unlock()
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	s.mu.Lock()
	s.started[t.Lease] = true
	s.mu.Unlock()
	return nil
}

// Moves records every write that went through. A conditional write must never let two moves
// start from the same version of a task: that would be a double transition.
type Moves struct {
	task.Store
	mu   sync.Mutex
	from map[string]int // "<task>@<version>": writes from that version
}

func (s *Moves) Update(ctx context.Context, t task.Task, prev int64) error {
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.from == nil {
		s.from = map[string]int{}
	}
	s.from[fmt.Sprintf("%s@%d", t.ID, prev)]++
	return nil
}

// Doubles lists the versions that more than one write started from.
func (s *Moves) Doubles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.from {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s moved %d times", k, n))
		}
	}
	slices.Sort(out)
	return out
}

// Owner watches the writes of one worker: it may heartbeat or complete only attempts that it
// claimed itself. A write for another's attempt means its stale lease was accepted. A claim is a
// write to processing (or claimed, as older versions did) from enqueued: the status read before
// the write, which Get remembers by version, tells it from a heartbeat.
type Owner struct {
	task.Store
	mu      sync.Mutex
	read    map[string]task.Status // "<lambda>/<task>#<version>": the status Get returned
	claimed map[string]bool        // "<task>#<attempt>"
	foreign []string
}

func (s *Owner) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	t, err := s.Store.Get(ctx, lambda, id)
	if err == nil {
		s.mu.Lock()
		if s.read == nil {
			s.read = map[string]task.Status{}
		}
		s.read[fmt.Sprintf("%s/%s#%d", lambda, id, t.Version)] = t.Status
		s.mu.Unlock()
	}
	return t, err
}

func (s *Owner) Update(ctx context.Context, t task.Task, prev int64) error {
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	key := fmt.Sprintf("%s#%d", t.ID, t.Attempts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed == nil {
		s.claimed = map[string]bool{}
	}
	readKey := fmt.Sprintf("%s/%s#%d", t.Lambda, t.ID, prev)
	from := s.read[readKey]
	delete(s.read, readKey)
	switch {
	case from == task.StatusEnqueued && slices.Contains(task.Running, t.Status):
		s.claimed[key] = true
	case t.Status == task.StatusProcessing || t.Status == task.StatusSuccess: // only a lease holder writes these
		if !s.claimed[key] {
			s.foreign = append(s.foreign, fmt.Sprintf("%s: wrote %s for attempt %d, which it never claimed", t.ID, t.Status, t.Attempts))
		}
	}
	return nil
}

// Foreign lists the writes the worker made for attempts it did not claim.
func (s *Owner) Foreign() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.foreign)
}

// SlowStatus makes the status controller slow, as a status function that is slow to answer or
// times out: every claim and heartbeat (a write to processing) waits a random time up to Max.
// For the runs Fail picks, every heartbeat after the claim (the start) then hangs from 2/3 of Max
// to Max and fails without writing, as a status function that times out on its store: the
// heartbeats of those runs fail slowly from then on. A wait ignores the caller's deadline on
// purpose: a call that hangs does not stop for it.
type SlowStatus struct {
	task.Store
	Max    time.Duration
	Fail   func(task.Task) bool
	calls  atomic.Int64
	faults atomic.Int64
	mu     sync.Mutex
	bad    map[string]bool // by lease: whether the run's heartbeats fail; absent until it starts
}

// Calls is how many status writes were slowed, and Faults how many of them failed.
func (s *SlowStatus) Calls() int  { return int(s.calls.Load()) }
func (s *SlowStatus) Faults() int { return int(s.faults.Load()) }

func (s *SlowStatus) Update(ctx context.Context, t task.Task, prev int64) error {
	if t.Status != task.StatusClaimed && t.Status != task.StatusProcessing {
		return s.Store.Update(ctx, t, prev)
	}
	s.calls.Add(1)
	s.mu.Lock()
	if s.bad == nil {
		s.bad = map[string]bool{}
	}
	bad, started := s.bad[t.Lease]
	if !started && t.Status == task.StatusProcessing {
		s.bad[t.Lease] = s.Fail(t) // decided at the claim, which starts the run and goes through
	}
	s.mu.Unlock()
	if !bad {
		time.Sleep(rand.N(s.Max + 1))
		return s.Store.Update(ctx, t, prev)
	}
	time.Sleep(s.Max*2/3 + rand.N(s.Max/3+1))
	s.faults.Add(1)
	return errInjected("status call timed out")
}

// SlowStore delays the consumer's calls on one lambda (Lambda), each by a random time up to Max:
// its due queries, its lists and its enqueue writes, as a throttled or overloaded shard would.
// Claims, heartbeats and results are not delayed: a slow status path is a scenario of its own.
type SlowStore struct {
	task.Store
	Lambda   string
	Max      time.Duration
	delayed  atomic.Int64
	inFlight atomic.Int64
	beside   atomic.Int64
}

// Delayed is how many calls were delayed.
func (s *SlowStore) Delayed() int { return int(s.delayed.Load()) }

// Beside is how many tasks of other lambdas were enqueued while a call on Lambda was delayed or
// still running: the consumer kept moving them, rather than waiting for the slow lambda.
func (s *SlowStore) Beside() int { return int(s.beside.Load()) }

// slow runs fn after a random delay, or fails if ctx ends first.
func (s *SlowStore) slow(ctx context.Context, fn func() error) error {
	s.delayed.Add(1)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	t := time.NewTimer(rand.N(max(s.Max, 1)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return fn()
}

func (s *SlowStore) Due(ctx context.Context, p task.DueParams) (tasks []task.Task, err error) {
	if p.Lambda != s.Lambda {
		return s.Store.Due(ctx, p)
	}
	err = s.slow(ctx, func() error { tasks, err = s.Store.Due(ctx, p); return err })
	return tasks, err
}

func (s *SlowStore) Triggered(ctx context.Context, lambda string) (found bool, err error) {
	if lambda != s.Lambda {
		return s.Store.Triggered(ctx, lambda)
	}
	err = s.slow(ctx, func() error { found, err = s.Store.Triggered(ctx, lambda); return err })
	return found, err
}

func (s *SlowStore) List(ctx context.Context, p task.ListParams) (tasks []task.Task, next string, err error) {
	if p.Lambda != s.Lambda {
		return s.Store.List(ctx, p)
	}
	err = s.slow(ctx, func() error { tasks, next, err = s.Store.List(ctx, p); return err })
	return tasks, next, err
}

func (s *SlowStore) Update(ctx context.Context, t task.Task, prev int64) error {
	switch {
	case t.Status != task.StatusEnqueued:
		return s.Store.Update(ctx, t, prev)
	case t.Lambda == s.Lambda:
		return s.slow(ctx, func() error { return s.Store.Update(ctx, t, prev) })
	}
	err := s.Store.Update(ctx, t, prev)
	if err == nil && s.inFlight.Load() > 0 {
		s.beside.Add(1)
	}
	return err
}

// The flow store's calls fail alike: edges and upstreams added are writes, the reads of edges,
// upstreams and tasks are reads.

func (s *FaultyStore) AddEdges(ctx context.Context, edges []task.Edge) error {
	return s.write("add edges", func() error { return s.Store.AddEdges(ctx, edges) })
}

func (s *FaultyStore) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	return s.write("add upstreams", func() error { return s.Store.AddUpstreams(ctx, t, prev, from) })
}

func (s *FaultyStore) Downstreams(ctx context.Context, up task.Ref, cursor string, limit int) ([]task.Edge, string, error) {
	if s.roll() || s.roll() {
		return nil, "", errInjected("downstreams")
	}
	return s.Store.Downstreams(ctx, up, cursor, limit)
}

func (s *FaultyStore) Upstreams(ctx context.Context, down task.Ref, from, limit int) ([]task.Ref, error) {
	if s.roll() || s.roll() {
		return nil, errInjected("upstreams")
	}
	return s.Store.Upstreams(ctx, down, from, limit)
}

func (s *FaultyStore) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	if s.roll() || s.roll() {
		return nil, errInjected("get many")
	}
	return s.Store.GetMany(ctx, refs)
}

// LostClaimAnswers lands claim writes and loses their answers: the first write of each attempt
// of a task that claims it (enqueued to processing) goes through, and the caller gets an error
// that does not say it was refused, as when a response is lost after the write committed. The
// next claim of the same attempt, once the first was handed back, is answered. Claims written in
// a batch (task.BatchUpdater) lose their answers the same way.
type LostClaimAnswers struct {
	task.Store
	mu   sync.Mutex
	lost map[string]bool // lambda/id/attempt whose claim lost its answer
}

// errAnswerLost is the error of a claim whose write landed.
var errAnswerLost = errors.New("injected: the claim was written and its answer lost")

// Lost is how many claim answers were lost.
func (s *LostClaimAnswers) Lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lost)
}

// loses reports whether the answer to the write of t is lost, the first time for its attempt.
func (s *LostClaimAnswers) loses(t task.Task) bool {
	if t.Status != task.StatusProcessing || t.From != task.StatusEnqueued {
		return false
	}
	key := fmt.Sprint(t.Lambda, "/", t.ID, "/", t.Attempts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost[key] {
		return false
	}
	if s.lost == nil {
		s.lost = map[string]bool{}
	}
	s.lost[key] = true
	return true
}

func (s *LostClaimAnswers) Update(ctx context.Context, t task.Task, prev int64) error {
	if err := s.Store.Update(ctx, t, prev); err != nil {
		return err
	}
	if s.loses(t) {
		return errAnswerLost
	}
	return nil
}

// UpdateMany writes through the store's own UpdateMany if it has one.
func (s *LostClaimAnswers) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	errs := task.UpdateMany(ctx, s.Store, ws)
	for i, err := range errs {
		if err == nil && s.loses(ws[i].Task) {
			errs[i] = errAnswerLost
		}
	}
	return errs
}

// GetBatch reads through the store's own GetBatch if it has one.
func (s *LostClaimAnswers) GetBatch(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	return task.GetBatch(ctx, s.Store, refs)
}

// Unwrap is the store written to (task.Batched).
func (s *LostClaimAnswers) Unwrap() task.Store { return s.Store }
