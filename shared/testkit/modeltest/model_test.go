package modeltest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"pgregory.net/rapid"
)

// raceDetector is set when the test binary is built with -race.
var raceDetector = false

func TestMain(m *testing.M) {
	flag.Parse()
	// Our defaults, unless the command line or the environment says otherwise: about 100 steps
	// a check, as rapid's 30 rarely take a task through a timeout and a retry; fewer checks
	// under the race detector; and no fail files written into the source tree (a failure
	// prints its seed).
	defaults := map[string]string{"rapid.steps": "100", "rapid.nofailfile": "true"}
	if raceDetector {
		defaults["rapid.checks"] = "10"
	}
	for name, value := range defaults {
		set := false
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		env := "RAPID_" + strings.ToUpper(strings.TrimPrefix(name, "rapid."))
		if _, ok := os.LookupEnv(env); !set && !ok {
			flag.Set(name, value)
		}
	}
	os.Exit(m.Run())
}

// The model's fixed choices.
const (
	// payloadLimit is small, so a result over the limit is cheap to make.
	payloadLimit = 64
	// maxTasks is how many tasks a check may schedule: t1 to t6. Messages and calls may name
	// any of them, scheduled or not.
	maxTasks = 6
)

var (
	epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// collections a task may belong to; as gate targets, "" is the whole lambda.
	collections = []string{"", "a", "b"}
	outcomes    = []status.Outcome{status.Success, status.Retriable, status.Fatal, status.Snoozed}
	// delays a handler may ask to run again after (worker.Snooze, worker.RetryAfter).
	delays = []time.Duration{0, 30 * time.Second, 2 * time.Minute, time.Hour}
)

// TestModel checks the guarantees on random histories of the real components. The store is
// shared by the checks; each check has a lambda of its own, so nothing carries over.
func TestModel(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(dbDir(t), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := &tally{ended: map[task.Status]int{}}
	rapid.Check(t, func(rt *rapid.T) {
		c.checks++
		m := newMachine(rt, newSystem(store, fmt.Sprintf("model-%d", c.checks)), c)
		m.start(rt)
		rt.Repeat(m.actions())
		m.drain(rt)
	})
	t.Log(c)
}

// tally counts what the checks of a test did, so a run shows that the steps reached the states
// that matter (go test -v prints it).
type tally struct {
	checks, steps         int
	claims, refusedClaims int
	staleCalls            int // heartbeats, results and releases refused for a lease that died
	timeouts, reclaims    int // tasks timed out by a sweep, and claimed again after
	minGap                time.Duration
	races, lostRaces      int // races, and conditional writes that lost one
	restarts              int
	runningCancels        int // cancels accepted while their task ran
	ended                 map[task.Status]int
}

func (c *tally) String() string {
	return fmt.Sprintf("%d checks, %d steps: %d claims accepted, %d refused; %d calls with a dead lease refused; "+
		"%d tasks timed out, %d claimed again (the nearest %s after the silent execution's last call); "+
		"%d races, %d conditional writes lost one; %d restarts; %d cancels of running tasks; tasks ended %v",
		c.checks, c.steps, c.claims, c.refusedClaims, c.staleCalls, c.timeouts, c.reclaims, c.minGap,
		c.races, c.lostRaces, c.restarts, c.runningCancels, c.ended)
}

// dbDir returns a directory for the store: in /dev/shm where the machine has it, since the model
// tests what the store does and not the disk under it, and the store syncs every write: on a
// disk the syncs take twice the time of everything else. Elsewhere, the test's temporary
// directory.
func dbDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "atf-modeltest-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// system is the framework under test: real components on one fake clock.
type system struct {
	store *hookStore
	queue *memqueue.Queue
	// ahead holds the messages the frontend sent ahead of their run time: memqueue delays on the
	// wall clock, so the model holds them until its own clock reaches their run time (release).
	ahead  []task.Message
	front  *frontend.Service
	cons   *consumer.Consumer
	status *status.Controller
	lambda task.Lambda
	cfg    task.Config
	now    time.Time
	jitter float64
	log    *slog.Logger
}

func newSystem(store task.Store, lambda string) *system {
	s := &system{
		store:  &hookStore{Store: store},
		lambda: task.Lambda{Name: lambda}.WithDefaults(),
		cfg:    task.Config{PayloadLimit: payloadLimit}.WithDefaults(),
		now:    epoch,
		jitter: 0.5,
		log:    slog.New(slog.DiscardHandler),
	}
	s.front = frontend.New(s.store, frontend.Config{Lambdas: task.FixedCatalog{s.lambda}, Task: s.cfg, Now: s.clock, Queue: aheadQueue{s}, SendFirst: true, Logger: s.log})
	// Claims read the gates afresh (no snapshot age), so the model knows which gates they see.
	s.status = status.New(s.store, status.Config{Task: s.cfg, Now: s.clock, Jitter: s.jitterFn, Logger: s.log, Queue: aheadQueue{s},
		Gates: &task.GateSnapshot{Store: s.store}, EarlyWait: -1}) // no wait for a create on the wall clock: the model's claims come after its creates
	s.restart()
	return s
}

func (s *system) clock() time.Time     { return s.now }
func (s *system) jitterFn() float64    { return s.jitter }
func (s *system) name() string         { return s.lambda.Name }
func (s *system) ctx() context.Context { return context.Background() }

// restart gives the system a new queue and consumer, as a new process of `atf dev` has: the
// messages of the old one are gone. The store stays.
func (s *system) restart() {
	s.queue, s.ahead = memqueue.New(), nil
	s.cons = consumer.New(s.store, aheadQueue{s}, consumer.Config{
		Lambdas: task.FixedCatalog{s.lambda}, Task: s.cfg, Now: s.clock, Jitter: s.jitterFn, Logger: s.log,
	})
}

// aheadQueue is the queue of the frontend, the consumer and the status controller: the system's,
// with the delays of messages sent ahead on the model's clock.
type aheadQueue struct{ s *system }

func (q aheadQueue) Send(ctx context.Context, msgs ...task.Message) error {
	for _, m := range msgs {
		if m.RunAt != nil && m.RunAt.After(q.s.now) {
			q.s.ahead = append(q.s.ahead, m)
		} else if err := q.s.queue.Send(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (q aheadQueue) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	return q.s.queue.Receive(ctx, p)
}
func (q aheadQueue) Delete(ctx context.Context, d task.Delivery) error {
	return q.s.queue.Delete(ctx, d)
}
func (q aheadQueue) Extend(ctx context.Context, d task.Delivery, v time.Duration) error {
	return q.s.queue.Extend(ctx, d, v)
}

// release sends the messages sent ahead whose run time the clock has reached.
func (s *system) release() {
	kept := s.ahead[:0]
	for _, m := range s.ahead {
		if m.RunAt.After(s.now) {
			kept = append(kept, m)
			continue
		}
		m.Delay = 0
		_ = s.queue.Send(s.ctx(), m)
	}
	s.ahead = kept
}

// hookStore is the store every component shares. Before its next Update it runs hook, once: a
// race lets a whole call land between another call's read and its conditional write.
type hookStore struct {
	task.Store
	hook      func()
	conflicts int // updates refused because the task had changed
}

func (s *hookStore) Update(ctx context.Context, t task.Task, prev int64) error {
	if f := s.hook; f != nil {
		s.hook = nil
		f()
	}
	err := s.Store.Update(ctx, t, prev)
	if errors.Is(err, task.ErrConflict) {
		s.conflicts++
	}
	return err
}

// A worker is what claimed a task: a controller and its executor, driven by the model rather
// than by goroutines, so it can also misbehave: go silent, crash, or call after it should have
// stopped.
type worker struct {
	name    string
	task    string
	lease   string
	crashed bool // it never calls again
	stopped bool // a real executor would make no more calls: it reported, or lost the lease
	missed  int  // heartbeats in a row that it saw fail
}

// machine is the model: what was scheduled, what each worker holds, what the store was last
// seen to hold, and the history of accepted executions.
type machine struct {
	t      *rapid.T
	sys    *system
	tally  *tally
	hist   *history
	ids    []string             // scheduled tasks, in order
	specs  map[string]task.Spec // their requests
	seen   map[string]task.Task // each task as last read
	claims map[string]int       // accepted claims less accepted releases: the attempts a task must count
	asked  map[string]time.Time // when the latest accepted result with a delay asked its task to run again
	// cancelled holds the tasks a cancel was accepted for: each must end cancelled, never otherwise.
	cancelled map[string]bool
	inbox     []task.Delivery // received messages whose claim is not settled
	workers   []*worker
	gates     map[string]string // by collection; "" is the lambda
	step      int
	// What the current step met, reported by check: broken invariants, and calls whose outcome
	// the model did not expect.
	problems, surprises []string
}

func newMachine(t *rapid.T, s *system, c *tally) *machine {
	m := &machine{t: t, sys: s, tally: c, specs: map[string]task.Spec{}, seen: map[string]task.Task{}, claims: map[string]int{}, asked: map[string]time.Time{},
		gates: map[string]string{}, cancelled: map[string]bool{}}
	m.hist = newHistory(task.MaxMissedHeartbeats*s.cfg.HeartbeatInterval, m.problem)
	return m
}

// problem records a broken invariant. format starts with the kind of problem, up to its first
// colon: the failure names only that, the details go to the log. rapid shrinks a failing
// sequence only while it fails with the same message, and names and numbers of tasks, workers
// and steps change as it drops steps.
func (m *machine) problem(format string, args ...any) {
	m.report(&m.problems, "invariant broken", format, args)
}

// surprise records a call whose outcome is not what the model expects, the same way.
func (m *machine) surprise(format string, args ...any) {
	m.report(&m.surprises, "unexpected", format, args)
}

func (m *machine) report(list *[]string, label, format string, args []any) {
	m.t.Logf("%s: %s", label, fmt.Sprintf(format, args...))
	kind, _, _ := strings.Cut(format, ":")
	if !slices.Contains(*list, kind) {
		*list = append(*list, kind)
	}
}

// logf describes a step. rapid prints the log of the shrunk failing check.
func (m *machine) logf(format string, args ...any) {
	m.t.Logf("%3d %s  "+format, append([]any{m.step, m.sys.now.Sub(epoch)}, args...)...)
}

// unexpected records an error that no step should meet. Its text names the lambda, so only its
// kind goes into the problem.
func (m *machine) unexpected(what string, err error) {
	m.t.Logf("%s: %v", what, err)
	m.surprise("a call failed unexpectedly: %s: %s", what, kind(err))
}

func kind(err error) string {
	if err == nil {
		return "ok"
	}
	for _, k := range []error{task.ErrNotFound, task.ErrExists, task.ErrConflict, task.ErrStaleLease, task.ErrInvalid,
		task.ErrTooLarge, task.ErrNotDue, task.ErrThrottled, task.ErrCancelled} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "unexpected error"
}

func running(s task.Status) bool { return slices.Contains(task.Running, s) }
func waiting(s task.Status) bool { return slices.Contains(task.Waiting, s) }

func (m *machine) actions() map[string]func(*rapid.T) {
	// rapid draws the actions evenly. The path of a task (schedule, sweep, deliver, claim,
	// heartbeat, complete) gets an action each; faults and the operator's moves share one each,
	// or cancels and restarts would end most tasks before they run.
	return map[string]func(*rapid.T){
		"":          m.check,
		"schedule":  m.scheduleAction,
		"advance":   m.advanceAction,
		"sweep":     m.sweepAction,
		"tick":      m.tickAction,
		"deliver":   m.deliverAction,
		"claim":     m.claimAction,
		"heartbeat": m.heartbeatAction,
		"complete":  m.completeAction,
		"race":      m.raceAction,
		"fault": m.oneOf("fault", map[string]func(*rapid.T){
			"crash": m.crashAction, "release": m.releaseAction, "lose": m.loseAction,
			"redeliver": m.redeliverAction, "duplicate": m.duplicateAction,
		}),
		"operator": m.oneOf("move", map[string]func(*rapid.T){
			"cancel": m.cancelAction, "gate": m.gateAction, "restart": m.restartAction,
		}),
	}
}

// oneOf returns an action that runs one of actions. One that cannot run now does nothing.
func (m *machine) oneOf(label string, actions map[string]func(*rapid.T)) func(*rapid.T) {
	names := slices.Sorted(maps.Keys(actions))
	return func(t *rapid.T) {
		m.step++
		actions[rapid.SampledFrom(names).Draw(t, label)](t)
	}
}

// Draws that pick a task, a worker or a message pick by a small number that keeps its meaning
// when rapid drops an earlier step while it shrinks a failure: a task by its id, out of a few;
// a worker by how recently it claimed; a message by its place in the order of receipt.

// drawTask returns the id of one of a few tasks, scheduled or not.
func drawTask(t *rapid.T, label string) string {
	return fmt.Sprintf("t%d", rapid.IntRange(1, maxTasks).Draw(t, label))
}

// drawWorker returns one of ws (oldest first), counting from the newest, or nil if ws is empty.
func drawWorker(t *rapid.T, ws []*worker) *worker {
	k := rapid.IntRange(0, 3).Draw(t, "worker_from_newest")
	if len(ws) == 0 {
		return nil
	}
	return ws[len(ws)-1-min(k, len(ws)-1)]
}

// takeDelivery takes one received message out of the inbox, counting from the oldest.
func (m *machine) takeDelivery(t *rapid.T) (task.Delivery, bool) {
	k := rapid.IntRange(0, 3).Draw(t, "message_from_oldest")
	if len(m.inbox) == 0 {
		return task.Delivery{}, false
	}
	i := min(k, len(m.inbox)-1)
	d := m.inbox[i]
	m.inbox = slices.Delete(m.inbox, i, i+1)
	return d, true
}

// start schedules a few tasks, so most checks have work from the first step.
func (m *machine) start(t *rapid.T) {
	m.sys.jitter = rapid.SampledFrom([]float64{0.5, 0, 0.99}).Draw(t, "jitter")
	for i := range rapid.IntRange(1, 4).Draw(t, "initial_tasks") {
		m.schedule(t, fmt.Sprintf("t%d", i+1))
	}
	m.check(t)
}

// ---- The actions. Each is one step; check runs after every one.

// scheduleAction schedules a task. If its id is taken, the request is sent again: the same
// request (a client's retry) must return the stored task, a different one must be refused.
func (m *machine) scheduleAction(t *rapid.T) {
	m.step++
	id := drawTask(t, "task")
	if _, ok := m.specs[id]; !ok {
		m.schedule(t, id)
		return
	}
	spec := m.specs[id]
	same := rapid.Bool().Draw(t, "same_request")
	if !same {
		spec.Payload = []byte(`{"other":true}`)
	}
	// A request is checked before its id is looked up, and its delay is resolved against the
	// clock again: once the deadline is no longer after now + delay, even the same request is
	// refused as invalid rather than answered as a replay.
	stale := spec.Deadline != nil && !spec.Deadline.After(m.sys.now.Add(*spec.Delay))
	got, created, err := m.sys.front.Schedule(m.sys.ctx(), m.sys.name(), spec)
	m.logf("schedule %s again, same request %v: created %v, %s", id, same, created, kind(err))
	switch {
	case created:
		m.surprise("a task was created twice: %s", id)
	case stale && !errors.Is(err, task.ErrInvalid):
		m.surprise("a replay past its deadline was not refused as invalid: task %s, got %s", id, kind(err))
	case stale:
	case !same && !errors.Is(err, task.ErrConflict):
		m.surprise("an id reused by another request was not refused as a conflict: task %s, got %s", id, kind(err))
	case same && err != nil:
		m.unexpected("replay of the schedule of "+id, err)
	case same:
		m.look(got)
	}
}

// schedule schedules a new task with a random request.
func (m *machine) schedule(t *rapid.T, id string) {
	delay := rapid.SampledFrom([]time.Duration{0, 0, 0, 5 * time.Second, 90 * time.Second, 20 * time.Minute, 2 * time.Hour}).Draw(t, "delay")
	spec := task.Spec{
		ID:          id,
		Payload:     []byte(fmt.Sprintf(`{"id":%q}`, id)),
		Delay:       &delay,
		Priority:    rapid.SampledFrom(m.sys.lambda.Priorities).Draw(t, "priority"),
		Collection:  rapid.SampledFrom(collections).Draw(t, "collection"),
		MaxAttempts: rapid.IntRange(1, 4).Draw(t, "max_attempts"),
	}
	if rapid.IntRange(0, 3).Draw(t, "deadline") == 0 {
		d := m.sys.now.Add(delay + rapid.SampledFrom([]time.Duration{30 * time.Second, 5 * time.Minute, time.Hour}).Draw(t, "deadline_after"))
		spec.Deadline = &d
	}
	got, created, err := m.sys.front.Schedule(m.sys.ctx(), m.sys.name(), spec)
	if err != nil || !created {
		m.surprise("scheduling a new task failed: task %s: created %v, %s", id, created, kind(err))
		return
	}
	m.ids = append(m.ids, id)
	m.specs[id] = spec
	m.logf("schedule %s: delay %s, priority %s, collection %q, max attempts %d, deadline %v",
		id, delay, spec.Priority, spec.Collection, spec.MaxAttempts, spec.Deadline != nil)
	m.look(got)
}

func (m *machine) advanceAction(t *rapid.T) {
	m.step++
	var d time.Duration
	switch rapid.SampledFrom([]int{0, 0, 0, 1, 1, 2, 3}).Draw(t, "clock_range") {
	case 0: // within a heartbeat interval
		d = time.Duration(rapid.Int64Range(0, 10_000).Draw(t, "ms")) * time.Millisecond
	case 1: // around the claim and heartbeat timeouts
		d = time.Duration(rapid.Int64Range(10_000, 45_000).Draw(t, "ms")) * time.Millisecond
	case 2: // around the enqueue timeout
		d = time.Duration(rapid.Int64Range(1, 12).Draw(t, "minutes")) * time.Minute
	default: // far: past delays, deadlines and the longest backoff
		d = time.Duration(rapid.Int64Range(12, 180).Draw(t, "minutes")) * time.Minute
	}
	m.sys.now = m.sys.now.Add(d)
	m.logf("advance the clock by %s", d)
}

// tickAction is the consumer's poll loop: a little time passes, then it sweeps.
func (m *machine) tickAction(t *rapid.T) {
	m.step++
	d := time.Duration(rapid.Int64Range(0, 5_000).Draw(t, "ms")) * time.Millisecond
	m.sys.now = m.sys.now.Add(d)
	m.logf("%s later:", d)
	m.sweep(true)
}

func (m *machine) sweepAction(*rapid.T) {
	m.step++
	m.sweep(true)
}

// deliverAction receives messages as a controller does: from the highest priority queue that
// has any. They stay hidden for an hour, far longer than a check runs: they come back only by a
// redeliver step.
func (m *machine) deliverAction(t *rapid.T) {
	m.step++
	n := rapid.IntRange(1, 3).Draw(t, "max")
	for _, p := range m.sys.lambda.Priorities {
		ds, err := m.receive(p, n)
		if err != nil {
			m.unexpected("receive", err)
			return
		}
		if len(ds) == 0 {
			continue
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.TaskID)
		}
		m.inbox = append(m.inbox, ds...)
		m.logf("deliver from %s: %v", p, ids)
		return
	}
	m.logf("deliver: every queue is empty")
}

func (m *machine) receive(priority string, n int) ([]task.Delivery, error) {
	m.sys.release()
	return m.sys.queue.Receive(m.sys.ctx(), task.ReceiveParams{
		Lambda: m.sys.name(), Priority: priority, Max: n, Visibility: time.Hour,
	})
}

// claimAction settles a received message as controller.run does: claim its task, then delete
// the message whether the claim won or not. Now and then the controller dies before the delete,
// and the message comes back.
func (m *machine) claimAction(t *rapid.T) {
	if len(m.inbox) == 0 {
		t.Skip("no message received")
	}
	m.step++
	d, _ := m.takeDelivery(t)
	m.claim(d.TaskID, true)
	if rapid.IntRange(0, 4).Draw(t, "die_before_delete") == 0 {
		m.logf("  the controller dies before it deletes the message of %s", d.TaskID)
		m.putBack(d)
		return
	}
	if err := m.sys.queue.Delete(m.sys.ctx(), d); err != nil {
		m.unexpected("delete of a message", err)
	}
}

// putBack makes a received message visible again, as when its visibility timeout runs out.
func (m *machine) putBack(d task.Delivery) {
	if err := m.sys.queue.Extend(m.sys.ctx(), d, 0); err != nil {
		m.unexpected("redelivery of a message", err)
	}
}

// liveWorkers returns the workers that did not crash, of task id or of any task if id is empty,
// oldest first.
func (m *machine) liveWorkers(id string) []*worker {
	var ws []*worker
	for _, w := range m.workers {
		if !w.crashed && (id == "" || w.task == id) {
			ws = append(ws, w)
		}
	}
	return ws
}

// heartbeatAction: a worker heartbeats. It may have lost its lease long ago (it was paused, or it
// is a zombie that failed to stop), and the reply may be lost on the way back.
func (m *machine) heartbeatAction(t *rapid.T) {
	if len(m.liveWorkers("")) == 0 {
		t.Skip("no worker")
	}
	m.step++
	w := drawWorker(t, m.liveWorkers(""))
	lost := rapid.IntRange(0, 7).Draw(t, "reply_lost") == 0
	m.heartbeat(w, lost, true)
}

func (m *machine) completeAction(t *rapid.T) {
	if len(m.liveWorkers("")) == 0 {
		t.Skip("no worker")
	}
	m.step++
	w := drawWorker(t, m.liveWorkers(""))
	m.complete(w, m.drawResult(t), true)
}

func (m *machine) drawResult(t *rapid.T) status.Result {
	switch o := rapid.SampledFrom(outcomes).Draw(t, "outcome"); o {
	case status.Success:
		r := status.Result{Outcome: o, Result: []byte(`{"ok":true}`)}
		if rapid.IntRange(0, 4).Draw(t, "result_too_large") == 0 {
			r.Result = []byte(`"` + strings.Repeat("x", payloadLimit) + `"`)
		}
		return r
	case status.Snoozed:
		d := rapid.SampledFrom(delays).Draw(t, "delay")
		return status.Result{Outcome: o, Delay: &d}
	case status.Retriable:
		r := status.Result{Outcome: o, Error: "handler failed"}
		if rapid.Bool().Draw(t, "retry_after") {
			d := rapid.SampledFrom(delays).Draw(t, "delay")
			r.Delay = &d
		}
		return r
	default:
		return status.Result{Outcome: o, Error: "handler failed"}
	}
}

// releaseAction: a worker hands its task back untried, as an executor that shuts down does.
func (m *machine) releaseAction(t *rapid.T) {
	if w := drawWorker(t, m.liveWorkers("")); w != nil {
		m.release(w, true)
	}
}

// crashAction: a worker disappears without a word.
func (m *machine) crashAction(t *rapid.T) {
	if w := drawWorker(t, m.liveWorkers("")); w != nil {
		w.crashed = true
		m.logf("%s (task %s) crashes", w.name, w.task)
	}
}

// loseAction: a controller dies holding a received message. It stays hidden past the end of
// the check: the message is lost, and the store's enqueue timeout must bring the task back.
func (m *machine) loseAction(t *rapid.T) {
	if d, ok := m.takeDelivery(t); ok {
		m.logf("the message of %s is lost", d.TaskID)
	}
}

// redeliverAction: a received message comes back (its visibility ran out): a duplicate delivery.
func (m *machine) redeliverAction(t *rapid.T) {
	if d, ok := m.takeDelivery(t); ok {
		m.putBack(d)
		m.logf("the message of %s comes back", d.TaskID)
	}
}

// duplicateAction: the queue delivers extra copies of a message, perhaps for a task that ended
// long ago or was never scheduled.
func (m *machine) duplicateAction(t *rapid.T) {
	id := drawTask(t, "task")
	p := m.sys.lambda.DefaultPriority()
	if spec, ok := m.specs[id]; ok {
		p = spec.Priority
	}
	n := rapid.IntRange(1, 3).Draw(t, "copies")
	msgs := make([]task.Message, n)
	for i := range msgs {
		msgs[i] = task.Message{Lambda: m.sys.name(), Priority: p, TaskID: id}
	}
	if err := m.sys.queue.Send(m.sys.ctx(), msgs...); err != nil {
		m.unexpected("send", err)
	}
	m.logf("%d extra copies of the message of %s", n, id)
}

func (m *machine) cancelAction(t *rapid.T) {
	m.cancel(drawTask(t, "task"), true)
}

func (m *machine) gateAction(t *rapid.T) {
	target := rapid.SampledFrom(collections).Draw(t, "gate_target")
	// A drop ends every waiting task in its way: rarer than the rest.
	mode := rapid.SampledFrom([]string{task.GateOpen, task.GateOpen, task.GateOpen, task.GatePause, task.GatePause, task.GateDrop}).Draw(t, "gate_mode")
	m.setGate(target, mode)
}

func (m *machine) setGate(target, mode string) {
	if _, err := m.sys.front.SetGate(m.sys.ctx(), task.Gate{Lambda: m.sys.name(), Collection: target, Mode: mode}); err != nil {
		m.unexpected("set gate", err)
		return
	}
	m.gates[target] = mode
	m.logf("gate %q: %s", target, mode)
}

// restartAction: the whole process dies and starts again, as `atf dev` after a SIGKILL. The
// queue's messages, every worker and every received message die with it; the store stays, and
// consumer.Recover makes what was in flight due at once.
func (m *machine) restartAction(*rapid.T) {
	m.tally.restarts++
	for _, w := range m.workers {
		w.crashed = true
	}
	m.hist.orphan(m.ids)
	m.inbox = nil
	m.sys.restart()
	n, err := m.sys.cons.Recover(m.sys.ctx())
	m.logf("restart: %d tasks in flight recovered", n)
	if err != nil {
		m.unexpected("recover", err)
		return
	}
	for _, tk := range m.list() {
		if (tk.Status == task.StatusEnqueued || running(tk.Status)) && (tk.NextTriggerAt == nil || !tk.NextTriggerAt.Equal(m.sys.now)) {
			m.surprise("a task in flight was not due at once after a restart: task %s is %s", tk.ID, tk.Status)
		}
	}
}

// raceAction lets two calls about one task race: the first reads the task, the second runs
// whole, then the first makes its conditional write. Two controllers claiming from duplicate
// messages, a heartbeat against the sweep that times the task out, a result against a cancel...
func (m *machine) raceAction(t *rapid.T) {
	m.step++
	id := drawTask(t, "task")
	first := m.drawOp(t, id, "first")
	second := m.drawOp(t, id, "second")
	m.tally.races++
	m.logf("race on %s: %s against %s", id, first.name, second.name)
	m.sys.store.hook = func() { second.run(true) }
	first.run(false) // its outcome depends on the second: no prediction
	if m.sys.store.hook != nil {
		// The first call wrote nothing: the second simply follows it.
		m.sys.store.hook = nil
		second.run(true)
	}
}

type op struct {
	name string
	run  func(predict bool)
}

// drawOp draws a call about task id. A worker's call, when the task has no worker, does nothing.
func (m *machine) drawOp(t *rapid.T, id, label string) op {
	k := rapid.SampledFrom([]string{"claim", "sweep", "cancel", "heartbeat", "complete", "release"}).Draw(t, label)
	switch k {
	case "claim":
		return op{"a claim", func(p bool) { m.claim(id, p) }}
	case "sweep":
		return op{"a sweep", func(p bool) { m.sweep(p) }}
	case "cancel":
		return op{"a cancel", func(p bool) { m.cancel(id, p) }}
	}
	w := drawWorker(t, m.liveWorkers(id))
	if w == nil {
		return op{"no " + k + " (no worker)", func(bool) {}}
	}
	switch k {
	case "heartbeat":
		return op{"a heartbeat of " + w.name, func(p bool) { m.heartbeat(w, false, p) }}
	case "complete":
		r := m.drawResult(t)
		return op{fmt.Sprintf("a %s result of %s", r.Outcome, w.name), func(p bool) { m.complete(w, r, p) }}
	default:
		return op{"a release by " + w.name, func(p bool) { m.release(w, p) }}
	}
}

// ---- The calls, with what the model expects of them. predict is false for the first call of
// a race, whose outcome depends on the second.

func (m *machine) get(id string) (task.Task, bool) {
	tk, err := m.sys.store.Get(m.sys.ctx(), m.sys.name(), id)
	switch {
	case errors.Is(err, task.ErrNotFound):
		return task.Task{}, false
	case err != nil:
		m.unexpected("get "+id, err)
		return task.Task{}, false
	}
	return tk, true
}

// movedSince reports whether pre, a task as read before a call, has been written since: a sweep
// raced with the call from its own goroutines (it moves a pass's tasks concurrently), so the call
// met a task other than pre.
func (m *machine) movedSince(pre task.Task) bool {
	now, found := m.get(pre.ID)
	return !found || now.Version != pre.Version && now.Status != task.StatusProcessing && now.Status != task.StatusClaimed
}

func (m *machine) list() []task.Task {
	tasks, _, err := m.sys.store.List(m.sys.ctx(), task.ListParams{Lambda: m.sys.name(), Limit: task.MaxListLimit})
	if err != nil {
		m.unexpected("list", err)
	}
	return tasks
}

// holds reports whether pre, the task as read before a call, is owned by lease.
func holds(pre task.Task, lease string) bool { return running(pre.Status) && pre.Lease == lease }

// claim claims a task as a controller does for a message that names it, and returns the worker
// that got it, or nil.
func (m *machine) claim(id string, predict bool) *worker {
	pre, found := m.get(id)
	if found {
		m.hist.seen(id, running(pre.Status), pre.Lease)
	}
	gated := task.GateOpen
	if g := m.gate(""); g != task.GateOpen {
		gated = g
	} else if found {
		gated = m.gate(pre.Collection)
	}
	// A task sent ahead is not claimed before its run time (task.Task.NotBefore), whatever message
	// comes: a resend or a duplicate is refused.
	early := found && pre.NotBefore != nil && m.sys.now.Before(pre.NotBefore.Add(-task.ClaimEarly))
	got, err := m.sys.status.Claim(m.sys.ctx(), m.sys.name(), id, "", "")
	if err != nil {
		m.logf("claim of %s refused: %s", id, kind(err))
		m.tally.refusedClaims++
		switch {
		case errors.Is(err, task.ErrNotDue) && early:
			// Refused as early: the worker lets the message come back.
		case !errors.Is(err, task.ErrConflict) && !errors.Is(err, task.ErrNotFound):
			m.unexpected("claim of "+id, err)
		case predict && found && pre.Status == task.StatusEnqueued && gated == task.GateOpen && !early && !m.movedSince(pre):
			m.surprise("a claim of an enqueued task was refused: task %s (%s)", id, kind(err))
		case predict && !found && !errors.Is(err, task.ErrNotFound):
			m.surprise("a claim of an unknown task failed the wrong way: task %s: %s", id, kind(err))
		}
		return nil
	}
	w := &worker{name: fmt.Sprintf("w%d", len(m.workers)+1), task: id, lease: got.Lease}
	m.workers = append(m.workers, w)
	m.claims[id]++
	m.tally.claims++
	prev := m.hist.latest(id)
	e := m.hist.claimed(id, got.Lease, w.name, m.sys.now)
	if prev != nil && prev.endedBy == takenBack && !prev.orphaned {
		gap := m.sys.now.Sub(prev.lastAt)
		if m.tally.reclaims == 0 || gap < m.tally.minGap {
			m.tally.minGap = gap
		}
		m.tally.reclaims++
	}
	m.logf("%s claims %s: execution %s, attempt %d", w.name, id, e, got.Attempts)
	if got.Lease == "" || got.Status != task.StatusProcessing {
		m.surprise("a claim returned a task that is not processing (a claim starts it): task %s is %s, lease %v", id, got.Status, got.Lease != "")
	}
	if predict && (!found || pre.Status != task.StatusEnqueued) {
		m.surprise("a claim was accepted from a status other than enqueued: task %s was %s", id, pre.Status)
	}
	if predict && early {
		m.surprise("a claim was accepted before its task's run time: task %s, not before %s", id, pre.NotBefore)
	}
	if predict && gated != task.GateOpen {
		m.surprise("a claim was accepted while its gate was %s: task %s", gated, id)
	}
	return w
}

// heartbeat sends w's heartbeat and reports whether w saw it accepted.
func (m *machine) heartbeat(w *worker, lostReply, predict bool) bool {
	pre, _ := m.get(w.task)
	m.hist.seen(w.task, running(pre.Status), pre.Lease)
	err := m.sys.status.Heartbeat(m.sys.ctx(), m.sys.name(), w.task, w.lease)
	if errors.Is(err, task.ErrCancelled) {
		// The task was cancelled while it ran: the executor stops its handler and reports so.
		m.logf("%s heartbeats %s: cancelled", w.name, w.task)
		if predict && (!holds(pre, w.lease) || !pre.CancelRequested) {
			m.surprise("a heartbeat was answered cancelled for a task not cancelled: task %s by %s (%s)", w.task, w.name, pre.Status)
		}
		m.complete(w, status.Result{Outcome: status.Cancelled}, predict)
		return false
	}
	if err != nil {
		m.logf("%s heartbeats %s: refused (%s)", w.name, w.task, kind(err))
		switch {
		case predict && holds(pre, w.lease) && pre.CancelRequested:
			m.surprise("a heartbeat of a cancelled task was not answered cancelled: task %s by %s (%s)", w.task, w.name, kind(err))
		case !errors.Is(err, task.ErrStaleLease):
			m.unexpected("heartbeat of "+w.task, err)
		case predict && holds(pre, w.lease):
			m.surprise("a heartbeat with the current lease was refused: task %s by %s (%s)", w.task, w.name, kind(err))
		}
		w.missed, w.stopped = task.MaxMissedHeartbeats, true // a stale lease stops the executor at once
		m.tally.staleCalls++
		return false
	}
	m.hist.accepted(w.task, w.lease, "heartbeat", m.sys.now, false)
	m.logf("%s heartbeats %s: accepted, reply lost %v", w.name, w.task, lostReply)
	if predict && pre.CancelRequested {
		m.surprise("a heartbeat of a cancelled task renewed its lease: task %s by %s", w.task, w.name)
	}
	if predict && !holds(pre, w.lease) {
		m.surprise("a heartbeat with a stale lease was accepted: task %s by %s; the task is %s under another lease", w.task, w.name, pre.Status)
	}
	if lostReply {
		if w.missed++; w.missed >= task.MaxMissedHeartbeats {
			w.stopped = true
		}
		return false
	}
	w.missed = 0
	return true
}

// complete reports w's result.
func (m *machine) complete(w *worker, r status.Result, predict bool) {
	pre, _ := m.get(w.task)
	m.hist.seen(w.task, running(pre.Status), pre.Lease)
	got, err := m.sys.status.SetResult(m.sys.ctx(), m.sys.name(), w.task, w.lease, r)
	w.stopped = true
	if err != nil {
		m.logf("%s reports %s of %s: refused (%s)", w.name, r.Outcome, w.task, kind(err))
		m.tally.staleCalls++
		switch {
		case r.Outcome == status.Cancelled && errors.Is(err, task.ErrConflict):
			// Reported for a task never cancelled: only a race that moved the task can lead here.
			if predict {
				m.surprise("a cancelled run of a cancelled task was refused: task %s by %s (%s)", w.task, w.name, kind(err))
			}
		case !errors.Is(err, task.ErrStaleLease):
			m.unexpected("result of "+w.task, err)
		case predict && holds(pre, w.lease):
			m.surprise("a result with the current lease was refused: %s of task %s by %s (%s)", r.Outcome, w.task, w.name, kind(err))
		}
		return
	}
	if r.Outcome == status.Snoozed && got.Status == task.StatusNew {
		m.claims[w.task]-- // a snooze gives its attempt back
	}
	if r.Delay != nil {
		m.asked[w.task] = m.sys.now.Add(*r.Delay)
	}
	m.hist.accepted(w.task, w.lease, string(r.Outcome), m.sys.now, true)
	m.logf("%s reports %s of %s: accepted, task is %s", w.name, r.Outcome, w.task, got.Status)
	if predict {
		if !holds(pre, w.lease) {
			m.surprise("a result with a stale lease was accepted: %s of task %s by %s; the task is %s under another lease", r.Outcome, w.task, w.name, pre.Status)
		} else if want := m.after(pre, r); !slices.Contains(want, got.Status) {
			m.surprise("a result left its task in the wrong status: %s of task %s (attempt %d of %d) left it %s, want one of %v", r.Outcome, w.task, pre.Attempts, pre.MaxAttempts, got.Status, want)
		}
	}
	m.look(got)
}

// after returns the statuses a task as read before a result may have after it.
func (m *machine) after(pre task.Task, r status.Result) []task.Status {
	switch {
	case pre.CancelRequested || r.Outcome == status.Cancelled:
		return []task.Status{task.StatusCancelled} // a result after an accepted cancel is not kept
	case r.Outcome == status.Success && len(r.Result) > m.sys.cfg.PayloadLimit, r.Outcome == status.Fatal:
		return []task.Status{task.StatusFatalFailure}
	case r.Outcome == status.Success:
		return []task.Status{task.StatusSuccess}
	// A snooze waits as new, unless the deadline comes first; past task.MaxSnoozes it counts as
	// an attempt, as a retry does.
	case r.Outcome == status.Snoozed && pre.Snoozes < task.MaxSnoozes && pre.Deadline == nil:
		return []task.Status{task.StatusNew}
	case r.Outcome == status.Snoozed && pre.Snoozes < task.MaxSnoozes:
		return []task.Status{task.StatusNew, task.StatusDead}
	case pre.Attempts >= pre.MaxAttempts:
		return []task.Status{task.StatusDead}
	// A retry within task.MaxSendAhead that no gate holds is enqueued by the same write.
	case pre.Deadline == nil:
		return []task.Status{task.StatusRetriableFailure, task.StatusEnqueued}
	default: // dead if the deadline comes before the backoff ends
		return []task.Status{task.StatusRetriableFailure, task.StatusEnqueued, task.StatusDead}
	}
}

// release hands w's task back untried, as an executor that shuts down does.
func (m *machine) release(w *worker, predict bool) {
	pre, _ := m.get(w.task)
	m.hist.seen(w.task, running(pre.Status), pre.Lease)
	err := m.sys.status.Release(m.sys.ctx(), m.sys.name(), w.task, w.lease)
	w.stopped = true
	if err != nil {
		m.logf("%s releases %s: refused (%s)", w.name, w.task, kind(err))
		m.tally.staleCalls++
		switch {
		case !errors.Is(err, task.ErrStaleLease):
			m.unexpected("release of "+w.task, err)
		case predict && holds(pre, w.lease):
			m.surprise("a release with the current lease was refused: task %s by %s (%s)", w.task, w.name, kind(err))
		}
		return
	}
	if after, _ := m.get(w.task); after.Status != task.StatusCancelled {
		m.claims[w.task]-- // untried; a task cancelled while it ran ends cancelled, its attempt counted
	} else if predict && !pre.CancelRequested {
		m.surprise("a release ended a task cancelled that was not: task %s by %s", w.task, w.name)
	}
	m.hist.accepted(w.task, w.lease, "release", m.sys.now, true)
	m.logf("%s releases %s: accepted", w.name, w.task)
	if predict && !holds(pre, w.lease) {
		m.surprise("a release with a stale lease was accepted: task %s by %s; the task is %s under another lease", w.task, w.name, pre.Status)
	}
}

func (m *machine) cancel(id string, predict bool) {
	pre, found := m.get(id)
	got, err := m.sys.front.Cancel(m.sys.ctx(), m.sys.name(), id)
	m.logf("cancel %s (%s): %s", id, pre.Status, kind(err))
	if err != nil {
		switch {
		case !found && errors.Is(err, task.ErrNotFound):
		case !errors.Is(err, task.ErrConflict):
			m.unexpected("cancel of "+id, err)
		case predict && (waiting(pre.Status) || running(pre.Status)) && !m.movedSince(pre):
			m.surprise("a cancel of a waiting or running task was refused: task %s (%s)", id, pre.Status)
		}
		return
	}
	m.cancelled[id] = true
	if got.CancelRequested {
		m.tally.runningCancels++
	}
	switch {
	case !predict:
	case found && pre.Status == task.StatusCancelled: // answered as it stands: a retried cancel
		if got.Status != task.StatusCancelled || got.Version != pre.Version {
			m.surprise("a cancel of a cancelled task changed it: task %s is %s, version %d, was %d", id, got.Status, got.Version, pre.Version)
		}
	case !found || !waiting(pre.Status) && !running(pre.Status):
		m.surprise("a task was cancelled after it had ended: task %s was %s", id, pre.Status)
	case waiting(pre.Status) && got.Status != task.StatusCancelled:
		m.surprise("a cancel of a waiting task did not end it: task %s was %s, is %s", id, pre.Status, got.Status)
	case running(pre.Status) && (got.Status != pre.Status || !got.CancelRequested || got.Lease != pre.Lease):
		m.surprise("a cancel of a running task did not mark it, running under its lease: task %s was %s, is %s (marked %t)", id, pre.Status, got.Status, got.CancelRequested)
	}
	m.look(got)
}

// sweep runs one sweep of the consumer. Afterwards no task may be due, unless a pause gate holds
// it, and no waiting task may be left under a drop gate of the lambda, nor a due or parked one
// under a drop gate of its collection.
func (m *machine) sweep(predict bool) {
	st, err := m.sys.cons.Sweep(m.sys.ctx())
	m.logf("sweep: %+v", st)
	m.tally.timeouts += st.TimedOut
	if err != nil {
		m.unexpected("sweep", err)
		return
	}
	if !predict {
		return
	}
	lambda := m.gate("")
	for _, tk := range m.list() {
		coll := task.GateOpen
		if lambda == task.GateOpen {
			coll = m.gate(tk.Collection)
		}
		due := tk.NextTriggerAt != nil && !tk.NextTriggerAt.After(m.sys.now)
		switch {
		case tk.Status.Terminal():
		case waiting(tk.Status) && (lambda == task.GateDrop || coll == task.GateDrop && (due || tk.Parked)):
			m.surprise("a sweep left a waiting task under a drop gate: task %s is %s", tk.ID, tk.Status)
		case waiting(tk.Status) && coll == task.GateDrop:
			// A dropped collection's tasks are dropped as the sweep meets them, once due.
		case waiting(tk.Status) && (lambda == task.GatePause || coll == task.GatePause):
		case due:
			m.problem("a task was lost: the sweep left task %s %s and due", tk.ID, tk.Status)
		}
	}
}

func (m *machine) gate(target string) string {
	if g, ok := m.gates[target]; ok {
		return g
	}
	return task.GateOpen
}

// ---- The invariants.

// check reads every task of the check's lambda and checks the invariants, then reports every
// problem the step met.
func (m *machine) check(t *rapid.T) {
	tasks := m.list()
	stored := map[string]bool{}
	for _, tk := range tasks {
		stored[tk.ID] = true
		if _, ok := m.specs[tk.ID]; !ok {
			m.problem("the store holds a task never scheduled: %s", tk.ID)
		}
		m.look(tk)
	}
	for _, id := range m.ids {
		if !stored[id] {
			m.problem("a task was lost: task %s is not in the store", id)
		}
	}
	m.hist.overlaps(m.ids)
	// The first kind of problem names the failure; the log has the details of all.
	switch {
	case len(m.problems) > 0:
		t.Fatal("invariant broken: " + m.problems[0])
	case len(m.surprises) > 0:
		t.Fatal("unexpected: " + m.surprises[0])
	}
}

// look checks one task as read from the store, or as a call returned it, against what was seen
// of it before and against the history.
func (m *machine) look(tk task.Task) {
	id := tk.ID
	if prev, ok := m.seen[id]; ok {
		if tk.Version < prev.Version {
			m.problem("a task's version went back: task %s from %d to %d", id, prev.Version, tk.Version)
			return
		}
		if prev.Status.Terminal() && (tk.Status != prev.Status || tk.Version != prev.Version || tk.Attempts != prev.Attempts ||
			tk.Error != prev.Error || !bytes.Equal(tk.Result, prev.Result)) {
			m.problem("a terminal state changed: task %s was %s (version %d, %d attempts), is now %s (version %d, %d attempts)",
				id, prev.Status, prev.Version, prev.Attempts, tk.Status, tk.Version, tk.Attempts)
		}
	}
	m.seen[id] = tk

	// An accepted cancel ends its task cancelled, whatever raced it; nothing else cancels a task.
	switch {
	case tk.Status.Terminal() && m.cancelled[id] && tk.Status != task.StatusCancelled:
		m.problem("a task whose cancel was accepted ended otherwise: task %s is %s", id, tk.Status)
	case tk.Status == task.StatusCancelled && !m.cancelled[id]:
		m.problem("a task ended cancelled with no cancel accepted: task %s", id)
	}

	if tk.Attempts < 0 || tk.Attempts > tk.MaxAttempts {
		m.problem("attempts above the maximum: task %s has %d attempts; its maximum is %d", id, tk.Attempts, tk.MaxAttempts)
	}
	if tk.Attempts != m.claims[id] {
		m.problem("attempts do not count the accepted claims: task %s counts %d attempts, but %d claims of it were accepted (less releases)", id, tk.Attempts, m.claims[id])
	}

	// Not lost: every task that is not over has a next trigger, when the consumer looks at it
	// again, and that trigger is never further than the longest timeout (or its run time; for an
	// enqueued task, the longest wait between two sends of its message).
	switch {
	case tk.Status.Terminal() && tk.NextTriggerAt != nil:
		m.problem("a terminal task has a next trigger: task %s is %s", id, tk.Status)
	case !tk.Status.Terminal() && tk.NextTriggerAt == nil:
		m.problem("a task was lost: task %s is %s with no next trigger", id, tk.Status)
	case !tk.Status.Terminal():
		c := m.sys.cfg
		limit := m.sys.now.Add(max(c.EnqueueTimeout, c.HeartbeatTimeout, c.BackoffMax))
		if tk.Status == task.StatusEnqueued {
			// An unclaimed task is sent again after twice its last wait, up to a day.
			limit = m.sys.now.Add(max(c.EnqueueTimeout, task.MaxEnqueueWait))
		}
		if tk.RunAt.After(limit) {
			limit = tk.RunAt
		}
		if asked := m.asked[id]; asked.After(limit) {
			limit = asked // the handler's own delay (a snooze, a retry after)
		}
		if tk.NextTriggerAt.After(limit) {
			m.problem("a next trigger lies past every timeout: task %s is %s with its next trigger %s away", id, tk.Status, tk.NextTriggerAt.Sub(m.sys.now))
		}
	}

	// Leases: the store holds a lease only while the task runs, and only the last one issued.
	last := m.hist.latest(id)
	switch {
	case !running(tk.Status) && tk.Lease != "":
		m.problem("a task that is not running holds a lease: task %s is %s", id, tk.Status)
	case !running(tk.Status):
	case tk.Lease == "":
		m.problem("a running task has no lease: task %s is %s", id, tk.Status)
	case last == nil || tk.Lease != last.lease:
		which := "one no claim issued"
		if e := m.hist.byLease[tk.Lease]; e != nil {
			which = "execution " + e.String()
		}
		m.problem("lease tokens went backwards: task %s is %s under the lease of %s, not that of its last claim", id, tk.Status, which)
	case last.endedBy != "" && last.endedBy != takenBack:
		m.problem("a task runs under the lease of an ended execution: task %s is %s under execution %s, which ended (%s)", id, tk.Status, last, last.endedBy)
	}
	m.hist.seen(id, running(tk.Status), tk.Lease)
}

// ---- The drain.

// drain shows that nothing was lost: gates open, and from now on workers behave (they heartbeat,
// then report). The clock moves past every timeout, the consumer sweeps, and every message is
// claimed, until every task has ended.
func (m *machine) drain(t *rapid.T) {
	m.step++
	m.logf("drain")
	for _, c := range collections {
		if m.gate(c) != task.GateOpen {
			m.setGate(c, task.GateOpen)
		}
	}
	for len(m.inbox) > 0 {
		d := m.inbox[0]
		m.inbox = m.inbox[1:]
		m.settle(t, d)
	}
	for _, w := range m.liveWorkers("") {
		if !w.stopped {
			m.behave(t, w)
		}
	}
	c := m.sys.cfg
	wait := max(c.EnqueueTimeout, c.HeartbeatTimeout, c.BackoffMax) + time.Second
	for round := 0; round < 40 && !m.ended(); round++ {
		m.sys.now = m.sys.now.Add(wait)
		m.sweep(true)
		m.check(t)
		for _, p := range m.sys.lambda.Priorities {
			for {
				ds, err := m.receive(p, memqueue.MaxReceive)
				if err != nil {
					m.unexpected("receive", err)
				}
				if err != nil || len(ds) == 0 {
					break
				}
				for _, d := range ds {
					m.settle(t, d)
				}
			}
		}
	}
	for _, tk := range m.list() {
		m.tally.ended[tk.Status]++
		if !tk.Status.Terminal() {
			m.problem("a task was lost: task %s is still %s after the drain", tk.ID, tk.Status)
		}
	}
	m.tally.steps += m.step
	m.tally.lostRaces += m.sys.store.conflicts
	m.check(t)
}

// settle claims the task of a message and deletes the message; a worker that gets the task runs
// it and reports.
func (m *machine) settle(t *rapid.T, d task.Delivery) {
	w := m.claim(d.TaskID, true)
	if err := m.sys.queue.Delete(m.sys.ctx(), d); err != nil {
		m.unexpected("delete of a message", err)
	}
	m.check(t)
	if w != nil {
		m.behave(t, w)
	}
}

func (m *machine) behave(t *rapid.T, w *worker) {
	ok := m.heartbeat(w, false, true)
	m.check(t)
	if ok {
		m.complete(w, m.drawResult(t), true)
		m.check(t)
	}
}

func (m *machine) ended() bool {
	for _, tk := range m.list() {
		if !tk.Status.Terminal() {
			return false
		}
	}
	return true
}
