package task

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"time"
)

// Store keeps tasks and gates. Every backend passes the conformance suite in storetest.
type Store interface {
	// Create stores a new task. It returns ErrExists if the lambda already has a task with its id.
	Create(ctx context.Context, t Task) error
	// CreateBatch stores every task or none. It returns ErrExists, naming the task, if any id is
	// taken, and ErrInvalid for more than MaxBatch tasks or a task listed twice.
	CreateBatch(ctx context.Context, tasks []Task) error
	// Get returns one task, or ErrNotFound.
	Get(ctx context.Context, lambda, id string) (Task, error)
	// Update writes t if the stored task's version is still prev (t is the result of a transition
	// from it), and ErrConflict otherwise, also when the task is missing. It is atomic: of racing updates from one version,
	// exactly one wins. It writes every field but Payload: a payload is set once, by Create, and
	// a transition writes only what it changes, whatever the payload's size. If t.Ended is set,
	// the write records that attempt in the task's history (HistoryStore). If t.Limits is set
	// (a claim's start), the write takes the task's place under each of them in the same atomic
	// write, or fails with a *Held error (ErrHeld) and writes nothing: a place under a
	// concurrency cap is free if fewer tasks hold one, or if a task holding one no longer runs
	// the attempt it held it for; a start under a rate is due once the rate's interval has
	// passed since the start before. But a start held by a rate books its slot (RateHold): the
	// same atomic write moves the rate's next start past the slot and stores the slot on the
	// task (RateSlot, its version moved on, nothing else changed). A start on its booking
	// (BookingAt) is under no rate, and clears it.
	Update(ctx context.Context, t Task, prev int64) error
	// List returns tasks of one lambda in creation order, a page at a time, and the cursor of the
	// next page, empty after the last. A page reads at most p.ReadBudget() index entries after the
	// cursor (per shard, for a store that shards its index), whatever the filters: a filter that
	// matches few of the entries read gives a page with fewer tasks than the limit, or none, and a
	// cursor to go on, as DynamoDB's Query with a filter does. A caller that wants every match
	// goes on until the cursor is empty. The cursor is past every task returned and every entry
	// read, so no task comes twice and none that matched all along is skipped.
	List(ctx context.Context, p ListParams) (tasks []Task, next string, err error)
	// Due returns tasks of one lambda whose next trigger is at or before p.Before, earliest first.
	// A store may leave Payload out: a sweep never needs it, and Update does not write it.
	Due(ctx context.Context, p DueParams) ([]Task, error)
	// Triggered reports whether any task of the lambda has a next trigger, due or not, parked or
	// not: whether a sweep could find anything of it in any lane. A sweep of a lambda without one
	// skips its due reads, which an idle environment would pay for every lambda, lane and shard
	// (docs/capacity.md). It sees what Due would: a store whose index lags its writes lags here
	// as much.
	Triggered(ctx context.Context, lambda string) (bool, error)
	// Bury records that a message sent before its task was written (Message.Nonce) found no
	// task lambda/id and is dropped: until at least until, a Create of that task carrying nonce
	// fails with ErrBuried, and one carrying another nonce or none is not hindered. A tombstone
	// is no task: no read returns it. It fails with ErrExists if the task exists: the message is
	// then the task's to claim.
	Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error
	// Counts returns how many tasks of the lambda are in each status; statuses with none are absent.
	Counts(ctx context.Context, lambda string) (map[Status]int, error)
	// SetGate sets a gate; mode open removes it.
	SetGate(ctx context.Context, g Gate) error
	// Gates returns every gate that is not open.
	Gates(ctx context.Context) ([]Gate, error)
	// Close releases the store's resources.
	Close() error

	FlowStore
	RedriveStore
	ScheduleStore
	HistoryStore
}

// ScheduleStore keeps periodic schedules (see schedule.go).
type ScheduleStore interface {
	// CreateSchedule stores a new schedule. It returns ErrExists if the lambda already has a
	// schedule with its id.
	CreateSchedule(ctx context.Context, s Schedule) error
	// GetSchedule returns one schedule, read strongly, or ErrNotFound.
	GetSchedule(ctx context.Context, lambda, id string) (Schedule, error)
	// ListSchedules returns a page of at most limit (1..MaxListLimit) schedules of one lambda in
	// id order, and the cursor of the next page, empty after the last.
	ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]Schedule, string, error)
	// UpdateSchedule writes s if the stored schedule's version is still prev and its Incarnation
	// s's, and ErrConflict otherwise, also when it is missing: of racing updates from one
	// version, exactly one wins.
	UpdateSchedule(ctx context.Context, s Schedule, prev int64) error
	// FireSchedule makes firings of a schedule in one atomic write: it creates each of tasks
	// (at most MaxFiringsPerWrite) whose id is free, created[i] telling which, and writes s, if
	// the stored schedule is still at version prev and of s's Incarnation. Otherwise it writes
	// nothing and returns ErrConflict, also when the schedule is missing.
	FireSchedule(ctx context.Context, s Schedule, prev int64, tasks []Task) (created []bool, err error)
	// DeleteSchedule removes a schedule; ErrNotFound if there is none. The tasks it created stay.
	DeleteSchedule(ctx context.Context, lambda, id string) error
	// DueSchedules returns at most limit active schedules of one lambda whose NextFire is at or
	// before before, earliest first. It reads no more than that, whatever the lambda's other
	// schedules: paused ones and those not due are out of its range.
	DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]Schedule, error)
}

// FlowStore keeps what task flows need besides tasks (see flow.go). Create and CreateBatch store
// a task's After with it; Get returns it whole.
type FlowStore interface {
	// AddEdges records edges under their upstreams, so that Downstreams finds them, whether or
	// not the downstream tasks exist yet. Writing an edge again changes nothing.
	AddEdges(ctx context.Context, edges []Edge) error
	// Downstreams returns a page of at most limit edges from up (in a stable order, of every
	// lambda), and the cursor of the next page, empty after the last. An edge may name a task
	// that was never created (its create failed after AddEdges), or, rarely, an index whose
	// upstream is another task (an AddUpstreams that lost a race): callers check it against
	// Upstreams.
	Downstreams(ctx context.Context, up Ref, cursor string, limit int) (edges []Edge, next string, err error)
	// Upstreams returns down's After[from : from+limit] (shorter at its end), read strongly.
	Upstreams(ctx context.Context, down Ref, from, limit int) ([]Ref, error)
	// GetMany reads tasks like GetState (without payload and After, with result and error),
	// strongly, in the order of refs; a task that does not exist is a zero Task (ID empty).
	// It takes any number of refs.
	GetMany(ctx context.Context, refs []Ref) ([]Task, error)
	// AddUpstreams writes t, the result of task.AddUpstreams from a task at version prev, like
	// Update, and stores its After entries from index from on. ErrConflict if the version moved.
	AddUpstreams(ctx context.Context, t Task, prev int64, from int) error
}

// RedriveStore writes redriven tasks (see Redrive) and lists those that failed for good, the
// tasks a redrive takes, across lambdas.
type RedriveStore interface {
	// Redrive writes t, the result of task.Redrive from a task at version prev, like Update, and
	// its Payload too (which may be new), so that the task lives again with its payload and its
	// upstream list: a store that expires ended tasks keeps them for as long as the task lives.
	// ErrConflict if the version moved, or if the task's payload is gone (a store's retention
	// removed it) and t carries none: a new payload is then needed.
	Redrive(ctx context.Context, t Task, prev int64) error
	// ListFailed returns tasks of every lambda that failed for good (p.StatusSet(), some of
	// Failed), the latest updated first (then by lambda and id, descending), a page at a time,
	// and the cursor of the next page, empty after the last. A page reads about as many entries
	// as it holds, per status and per shard of a store that shards its index, whatever the
	// number of lambdas, of failed tasks and of others. A task redriven (or removed by a store's
	// retention) leaves it; the cursor is past every task returned, so none comes twice unless
	// it was updated meanwhile.
	ListFailed(ctx context.Context, p FailedParams) (tasks []Task, next string, err error)
}

// MaxBatch is how many tasks one CreateBatch takes: as many as one DynamoDB transaction holds.
const MaxBatch = 100

// CheckBatch returns ErrInvalid if tasks cannot be created as one batch.
func CheckBatch(tasks []Task) error {
	if len(tasks) > MaxBatch {
		return Errorf(ErrInvalid, "a batch holds at most %d tasks, got %d", MaxBatch, len(tasks))
	}
	seen := make(map[[2]string]bool, len(tasks))
	for _, t := range tasks {
		k := [2]string{t.Lambda, t.ID}
		if seen[k] {
			return Errorf(ErrInvalid, "task %q of lambda %s is in the batch twice", t.ID, t.Lambda)
		}
		seen[k] = true
	}
	return nil
}

// ListParams selects a page of one lambda's tasks. Empty filters match everything.
type ListParams struct {
	Lambda     string // required
	Status     Status
	Collection string
	Limit      int    // at most MaxListLimit; zero means DefaultListLimit
	Cursor     string // the next value of the previous page
	// Statuses, if any, match a task in any of them, as well as Status (see StatusSet): dead
	// letters are listed with both of Failed.
	Statuses []Status
	// CreatedFrom and CreatedTo, if set, bound the creation time: from inclusive, to exclusive.
	// Lists are in creation order, so stores read the range alone: it costs no reads outside it.
	CreatedFrom, CreatedTo time.Time
}

// PageSize is the number of tasks a page holds: Limit, within 1..MaxListLimit, or
// DefaultListLimit if Limit is zero or less.
func (p ListParams) PageSize() int {
	if p.Limit <= 0 {
		return DefaultListLimit
	}
	return min(p.Limit, MaxListLimit)
}

// ReadBudget is how many index entries a store reads at most for one page of p, per shard of its
// index: ListReadFactor × max(PageSize, DefaultListLimit). It is above PageSize, so a page
// without filters reads enough entries to fill itself.
func (p ListParams) ReadBudget() int {
	return ListReadFactor * max(p.PageSize(), DefaultListLimit)
}

// List page sizes, and the read budget of a page (see ReadBudget).
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	ListReadFactor   = 2
)

// DueParams selects due tasks of one lambda.
type DueParams struct {
	Lambda   string
	Priority string // empty means any
	// Statuses says which statuses to look at; empty means any. Running (timeouts), enqueued
	// (resends), pending (checks of new pending tasks, see flow.go) and Ended (ended tasks
	// with downstreams to tell) are each a lane of its own, apart from the waiting tasks' lanes.
	Statuses []Status
	Before   time.Time
	Limit    int // zero means no limit
	// Parked selects the tasks a gate parked (Task.Parked) instead of the others. The two are
	// apart in every store's layout: a sweep of waiting tasks never reads parked ones.
	Parked bool
	// Collection selects one collection's tasks; empty means every collection.
	Collection string
	// SkipCollections are collections to leave out. Among parked tasks a store skips each at
	// the cost of one small read (they are grouped by collection); among the others they are
	// filtered after reading, so they cost reads: the consumer parks held tasks instead.
	SkipCollections []string
}

// Queue carries task ids from the consumer to the workers: one queue per (lambda, priority).
// Like SQS it delivers at least once: a received message comes back after its visibility timeout
// unless it is deleted. Every backend passes the conformance suite in queuetest.
type Queue interface {
	// Send puts messages on their queues; a message with a Delay becomes visible after it.
	Send(ctx context.Context, msgs ...Message) error
	// Receive takes up to p.Max visible messages from one queue, waiting up to p.Wait for the
	// first, and hides them for p.Visibility.
	Receive(ctx context.Context, p ReceiveParams) ([]Delivery, error)
	// Delete removes a received message for good.
	Delete(ctx context.Context, d Delivery) error
	// Extend hides a received message for another d from now.
	Extend(ctx context.Context, d Delivery, visibility time.Duration) error
}

// Message names a task to run. It carries the id, never the payload.
type Message struct {
	Lambda   string `json:"lambda"`
	Priority string `json:"priority"`
	// Key is the task's key (Task.Key), empty for none: the queue shares itself fairly among keys.
	Key     string `json:"key,omitempty"`
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	// RunAt is set on a message sent before its task is due (EnqueueAhead): its Delay is in
	// whole seconds, and a worker that gets it early waits until RunAt to claim.
	RunAt *time.Time    `json:"run_at,omitempty"`
	Delay time.Duration `json:"-"`
	// DeadLetterTrips counts the trips to a dead-letter queue of the messages that the drain
	// sent again for this task, in a row (see DeadLettered); zero on every other message.
	DeadLetterTrips int `json:"dlq_trips,omitempty"`
	// Nonce is set on a message sent before its task was written (SendFirst), and on the task's
	// create (Task.Nonce): a claim that finds no task buries it (Store.Bury), so that the create
	// cannot land after its message was dropped.
	Nonce string `json:"nonce,omitempty"`
	// State is the whole task, its payload included, as the write that sent this message left
	// it: set by a sender that holds it so (the schedule path, which sends first), in the
	// process of an in-memory queue (atf dev), and never sent over the wire. A claim there may
	// start from it instead of reading the task. Its write is conditional on State's version, so
	// a task that moved since refuses it, and the claim reads the task then. (A sweep's or a
	// result's read leaves the payload out: their messages carry no State.)
	State *Task `json:"-"`
}

// WithState returns m carrying a copy of t as its State.
func (m Message) WithState(t Task) Message {
	m.State = &t
	return m
}

// SendFirst gives the task t, about to be created enqueued with its message m (EnqueueAhead),
// a fresh nonce, on both, for a message sent before its task is written.
func SendFirst(t Task, m Message) (Task, Message) {
	t.Nonce = rand.Text()
	m.Nonce = t.Nonce
	return t, m
}

// TombstoneLife is how long a tombstone (Store.Bury) keeps a create of its nonce out. A create
// lands within its caller's deadline plus the five minutes for which AWS accepts a signed
// request, or never (docs/guarantees.md, "Send, then write"): a day is far beyond it.
const TombstoneLife = 24 * time.Hour

// MessageAt returns the message that sends t to its queue at now: delayed to its NotBefore, and
// carrying it, if that is later.
func (t Task) MessageAt(now time.Time) Message {
	m := Message{Lambda: t.Lambda, Priority: t.Priority, Key: t.Key, TaskID: t.ID, Attempt: t.Attempts}
	if t.NotBefore != nil && t.NotBefore.After(now) {
		runAt := *t.NotBefore
		m.RunAt, m.Delay = &runAt, runAt.Sub(now)
	}
	return m
}

// Early is how long before its run time m was received at now: what a worker waits before it
// claims (zero for a message sent when its task was due).
func (m Message) Early(now time.Time) time.Duration {
	if m.RunAt == nil {
		return 0
	}
	return max(m.RunAt.Sub(now), 0)
}

// Delivery is a received message.
type Delivery struct {
	Message
	ID           string // the queue's id of the message: the same at every receive
	Receipt      string // identifies this receipt for Delete and Extend
	ReceiveCount int    // 1 on first delivery
}

// ReceiveParams selects what to receive.
type ReceiveParams struct {
	Lambda, Priority string
	Max              int
	Wait             time.Duration
	Visibility       time.Duration
}

// StateReader is a Store that can read a task without its payload, for the transitions that
// never need it (heartbeats, results, releases): a DynamoDB task keeps a large payload in an item
// of its own. Update never writes the payload, so a task read so may be written back.
type StateReader interface {
	GetState(ctx context.Context, lambda, id string) (Task, error)
}

// ApplyState is Apply for a transition that does not need the payload: it reads the task
// through s's GetState if s is a StateReader, or Get otherwise.
func ApplyState(ctx context.Context, s Store, lambda, id string, fn func(Task) (Task, error)) (Task, error) {
	if r, ok := s.(StateReader); ok {
		return apply(ctx, r.GetState, false, s, lambda, id, fn)
	}
	return Apply(ctx, s, lambda, id, fn)
}

// SendOrUnsent sends msgs, of tasks just written enqueued (sent ahead, or by a sweep), within
// sendCtx, and if that fails makes each of their tasks due again after a poll interval (Unsent),
// within unsentCtx, so that the consumer's next pass sends it rather than the enqueue timeout. The
// two contexts are apart: a send that used up its time must leave the writes theirs. It returns
// the send's error, for the caller to log.
func SendOrUnsent(sendCtx, unsentCtx context.Context, q Queue, s Store, msgs []Message, now time.Time, c Config) error {
	if len(msgs) == 0 {
		return nil
	}
	err := q.Send(sendCtx, msgs...)
	if err == nil {
		return nil
	}
	for _, m := range msgs {
		_, _ = ApplyState(unsentCtx, s, m.Lambda, m.TaskID, func(t Task) (Task, error) { return Unsent(t, now, c) })
	}
	return err
}

// Apply reads a task, computes a transition with fn and writes it conditionally. If another
// writer got there first it reads again and retries, a few times, so fn always sees the latest
// state; an error from fn itself (such as a transition not allowed from the new status) ends it.
// A write that failed with Changed carries the latest state already: the retry starts from it,
// without a read.
func Apply(ctx context.Context, s Store, lambda, id string, fn func(Task) (Task, error)) (Task, error) {
	return apply(ctx, s.Get, true, s, lambda, id, fn)
}

// apply is Apply reading through get: whole tells that get reads the whole task (Get), not its
// state (StateReader.GetState).
func apply(ctx context.Context, get func(ctx context.Context, lambda, id string) (Task, error), whole bool, s Store, lambda, id string, fn func(Task) (Task, error)) (Task, error) {
	var (
		t     Task
		found bool // t is the latest state, from a failed write
	)
	for range 5 {
		if !found {
			var err error
			if t, err = get(ctx, lambda, id); err != nil {
				return Task{}, err
			}
		}
		next, err := fn(t)
		if err != nil {
			return t, err
		}
		err = s.Update(ctx, next, t.Version)
		switch {
		case err == nil:
			return next, nil
		case !errors.Is(err, ErrConflict):
			return t, err
		}
		var changed *Changed
		found = errors.As(err, &changed) && changed.Current.ID != "" && (changed.Whole || !whole)
		if found {
			t = changed.Current
		}
	}
	return Task{}, Errorf(ErrConflict, "task %s/%s keeps changing; try again", lambda, id)
}

// Changed is the ErrConflict of an Update that found its task at another version, from a store
// that learns the task as it found it from the failed write itself (DynamoDB answers a failed
// condition with the item, at no cost): Apply tries again from Current instead of reading the
// task again. Current is the task as GetState reads it; Whole tells that it is also the task as
// Get reads it (it has no payload or upstream list kept apart).
type Changed struct {
	Current Task
	Whole   bool
	Msg     string
}

func (e *Changed) Error() string { return e.Msg }

// Unwrap makes a Changed match ErrConflict.
func (e *Changed) Unwrap() error { return ErrConflict }

// GateSnapshot reads the gates of a store at most once per Age and answers from what it read in
// between: the schedule path and the claim read them so, and a gate set acts on them within Age.
// It is safe for concurrent use.
type GateSnapshot struct {
	Store interface {
		Gates(ctx context.Context) ([]Gate, error)
	}
	Age time.Duration

	mu    sync.Mutex
	gates []Gate
	read  time.Time
	gen   uint64 // bumped by Invalidate: a read that began before is not kept
}

// Invalidate makes the next At read the gates again, and discards a read already under way: a
// process that sets a gate calls it after the write, so that its own schedules and claims see
// the gate at once.
func (g *GateSnapshot) Invalidate() {
	g.mu.Lock()
	g.read = time.Time{}
	g.gen++
	g.mu.Unlock()
}

// At returns the gates as read within Age before now, reading them again if need be.
func (g *GateSnapshot) At(ctx context.Context, now time.Time) ([]Gate, error) {
	g.mu.Lock()
	fresh := !g.read.IsZero() && !now.Before(g.read) && now.Sub(g.read) < g.Age
	gates, gen := g.gates, g.gen
	g.mu.Unlock()
	if fresh {
		return gates, nil
	}
	gates, err := g.Store.Gates(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.gen == gen { // no gate was set while this read was out: it may stand for Age
		g.gates, g.read = gates, now
	}
	g.mu.Unlock()
	return gates, nil
}

// Versioned is a task to write over the version it was read at, as Update(ctx, Task, Prev).
type Versioned struct {
	Task Task
	Prev int64
}

// BatchUpdater is a Store that writes many updates in one commit: the embedded store, where a
// commit's cost is mostly the pages it writes, and updates of one commit share them. Each update
// keeps its own condition and outcome, as with Update.
type BatchUpdater interface {
	UpdateMany(ctx context.Context, ws []Versioned) []error
}

// Batched reports whether s writes many updates in one commit: it is a BatchUpdater, and so is
// every store it wraps (through an Unwrap() Store method, as the stores that publish events or
// count metrics have), down to the one that writes. A wrapper's UpdateMany over a store without
// one writes one update after another, so a caller that batches for the commit's sake asks this.
func Batched(s Store) bool {
	for {
		if _, ok := s.(BatchUpdater); !ok {
			return false
		}
		w, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return true
		}
		s = w.Unwrap()
	}
}

// UpdateMany writes every update of ws, through s's UpdateMany if s is a BatchUpdater, or one
// Update after another otherwise, and returns the outcome of each: nil, ErrConflict, or the error
// that kept it from being written.
func UpdateMany(ctx context.Context, s Store, ws []Versioned) []error {
	if b, ok := s.(BatchUpdater); ok {
		return b.UpdateMany(ctx, ws)
	}
	errs := make([]error, len(ws))
	for i, w := range ws {
		errs[i] = s.Update(ctx, w.Task, w.Prev)
	}
	return errs
}

// CountGatherer is a Store that keeps its counts (Counts) in items of their own, written after
// each write that moves a task from one status to another: DynamoDB's counter items. Under the
// context GatherCounts returns, the store adds the moves of its writes up in memory, per counter
// item, and flush writes each item's sum: one write per item instead of one per move. flush runs
// to its end even if the caller's context has ended (the task writes it counts are made), and a
// write under the context after flush is counted at once, as without it. A caller that makes
// many writes together (the status function's batch, a consumer's pass) gathers them and flushes
// before it answers or ends. A store whose counts are kept in the task writes' own transactions
// (the embedded store's) has nothing to gather.
type CountGatherer interface {
	GatherCounts(ctx context.Context) (gathered context.Context, flush func())
}

// GatherCounts gathers the count moves of s's writes made under the context it returns, if s, or
// the store it wraps (through Unwrap() Store, see Batched), is a CountGatherer; otherwise it
// returns ctx and a flush that does nothing.
func GatherCounts(ctx context.Context, s Store) (context.Context, func()) {
	for {
		if g, ok := s.(CountGatherer); ok {
			return g.GatherCounts(ctx)
		}
		w, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return ctx, func() {}
		}
		s = w.Unwrap()
	}
}

// BatchGetter is a Store that reads many whole tasks in one read: the embedded store, whose
// claims of one batch of messages read their tasks together.
type BatchGetter interface {
	// GetBatch reads tasks like Get, with their payloads, but After may be left out (AfterCount
	// says how many upstreams a task has), in the order of refs; a task that does not exist is a
	// zero Task (ID empty).
	GetBatch(ctx context.Context, refs []Ref) ([]Task, error)
}

// GetBatch reads refs through s's GetBatch if s is a BatchGetter, or one Get after another.
func GetBatch(ctx context.Context, s Store, refs []Ref) ([]Task, error) {
	if b, ok := s.(BatchGetter); ok {
		return b.GetBatch(ctx, refs)
	}
	out := make([]Task, len(refs))
	for i, r := range refs {
		t, err := s.Get(ctx, r.Lambda, r.ID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[i] = t
		}
	}
	return out, nil
}
