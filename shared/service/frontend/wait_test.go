package frontend_test

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/taskend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// waitFixture is a service over the embedded store for Wait. With ends, the store is wrapped in
// a taskend.Store that the service is given as its Changes; without, the service polls.
type waitFixture struct {
	svc   *frontend.Service
	ends  *taskend.Store // nil when polling
	store *countingStore
}

func newWaitFixture(t *testing.T, withEnds bool, c frontend.Config) *waitFixture {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &waitFixture{store: &countingStore{Store: db}}
	var store task.Store = f.store
	if withEnds {
		f.ends = taskend.Wrap(f.store)
		store, c.Changes = f.ends, f.ends
	}
	c.Lambdas = task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}
	f.svc = frontend.New(store, c)
	return f
}

func (f *waitFixture) schedule(t *testing.T, id string) {
	t.Helper()
	if _, _, err := f.svc.Schedule(ctx, "echo", task.Spec{ID: id}); err != nil {
		t.Fatal(err)
	}
}

// waitFor starts a Wait of d on echo/id and returns where its answer comes.
func (f *waitFixture) waitFor(ctx context.Context, id string, d time.Duration) <-chan waitAnswer {
	answer := make(chan waitAnswer, 1)
	go func() {
		tk, err := f.svc.Wait(ctx, "echo", id, d)
		answer <- waitAnswer{tk, err}
	}()
	return answer
}

type waitAnswer struct {
	task task.Task
	err  error
}

// waiters blocks until the hub holds n waiters.
func (f *waitFixture) waiters(n int) {
	for f.ends.Waiters() != n {
		runtime.Gosched()
	}
}

// countingStore counts the reads of tasks, and has the state read of a store that keeps large
// payloads apart (task.StateReader), as DynamoDB's.
type countingStore struct {
	task.Store
	gets, stateGets atomic.Int64
	waiterGets      atomic.Int64 // the whole reads made under a context marked byWaiter
}

// byWaiter marks a context whose whole reads countingStore counts apart: those of one waiter.
type byWaiter struct{}

func (s *countingStore) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	s.gets.Add(1)
	if ctx.Value(byWaiter{}) != nil {
		s.waiterGets.Add(1)
	}
	return s.Store.Get(ctx, lambda, id)
}

func (s *countingStore) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	s.stateGets.Add(1)
	tk, err := s.Store.Get(ctx, lambda, id)
	tk.Payload = nil
	return tk, err
}

// TestWaitWokenByEnd: a waiter sleeps until another goroutine ends the task, and answers the
// task as it ended; the hub forgets it.
func TestWaitWokenByEnd(t *testing.T) {
	f := newWaitFixture(t, true, frontend.Config{MaxWait: time.Hour})
	f.schedule(t, "a")
	answer := f.waitFor(ctx, "a", time.Hour)
	f.waiters(1) // asleep, or about to be: an end from now on must wake it
	reads := f.store.gets.Load()
	go func() {
		if _, err := f.svc.Cancel(ctx, "echo", "a"); err != nil {
			t.Error(err)
		}
	}()
	a := <-answer
	if a.err != nil || a.task.Status != task.StatusCancelled || a.task.ID != "a" {
		t.Fatalf("wait answered %s, %v; want the cancelled task", a.task.Status, a.err)
	}
	// Asleep, the waiter reads nothing. Since it registered: maybe its first read (it registers
	// before it), the cancel's two, and its answer.
	if n := f.store.gets.Load() - reads; n > 4 {
		t.Errorf("%d reads between the waiter's registration and its answer; want at most 4", n)
	}
	if n := f.ends.Waiters(); n != 0 {
		t.Errorf("the hub holds %d waiters after the answer, want 0", n)
	}
}

// TestWaitTerminalAtOnce: a task already ended is answered without a wait.
func TestWaitTerminalAtOnce(t *testing.T) {
	for _, withEnds := range []bool{true, false} {
		f := newWaitFixture(t, withEnds, frontend.Config{MaxWait: time.Hour})
		f.schedule(t, "a")
		if _, err := f.svc.Cancel(ctx, "echo", "a"); err != nil {
			t.Fatal(err)
		}
		if tk, err := f.svc.Wait(ctx, "echo", "a", time.Hour); err != nil || tk.Status != task.StatusCancelled {
			t.Errorf("ends %v: wait answered %s, %v; want the cancelled task", withEnds, tk.Status, err)
		}
	}
}

// TestWaitEndsUnfinished: a wait that ends before the task answers the task as it stands.
func TestWaitEndsUnfinished(t *testing.T) {
	for _, withEnds := range []bool{true, false} {
		f := newWaitFixture(t, withEnds, frontend.Config{WaitPollFirst: time.Millisecond, WaitPollMax: 2 * time.Millisecond})
		f.schedule(t, "a")
		tk, err := f.svc.Wait(ctx, "echo", "a", 20*time.Millisecond)
		if err != nil || tk.Status != task.StatusNew || tk.ID != "a" {
			t.Errorf("ends %v: wait answered %+v, %v; want the new task", withEnds, tk, err)
		}
	}
}

// TestWaitBounds: a wait past MaxWait is cut to it, a negative one is invalid, and a wait under
// a deadline answers before it instead of failing.
func TestWaitBounds(t *testing.T) {
	f := newWaitFixture(t, true, frontend.Config{MaxWait: 20 * time.Millisecond})
	f.schedule(t, "a")
	if f.svc.MaxWait() != 20*time.Millisecond {
		t.Errorf("MaxWait %s, want the configured 20ms", f.svc.MaxWait())
	}
	if tk, err := f.svc.Wait(ctx, "echo", "a", time.Hour); err != nil || tk.Status != task.StatusNew {
		t.Errorf("a wait of an hour, cut to 20ms: %s, %v; want the new task", tk.Status, err)
	}
	if _, err := f.svc.Wait(ctx, "echo", "a", -time.Second); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("a negative wait: %v, want ErrInvalid", err)
	}
	if _, err := f.svc.Wait(ctx, "echo", "missing", time.Second); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("a wait for a missing task: %v, want ErrNotFound", err)
	}
	if _, err := f.svc.Wait(ctx, "nope", "a", time.Second); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("a wait for a task of an unknown lambda: %v, want ErrNotFound", err)
	}
	// The API function's context ends with the function's timeout: a wait keeps clear of it.
	g := newWaitFixture(t, true, frontend.Config{MaxWait: time.Hour})
	g.schedule(t, "a")
	dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if tk, err := g.svc.Wait(dctx, "echo", "a", time.Hour); err != nil || tk.Status != task.StatusNew {
		t.Errorf("a wait under a deadline: %s, %v; want the new task", tk.Status, err)
	}
}

// TestWaitCancelled: a waiter whose caller goes away ends with the context's error, and the hub
// forgets it.
func TestWaitCancelled(t *testing.T) {
	f := newWaitFixture(t, true, frontend.Config{MaxWait: time.Hour})
	f.schedule(t, "a")
	cctx, cancel := context.WithCancel(ctx)
	answer := f.waitFor(cctx, "a", time.Hour)
	f.waiters(1)
	cancel()
	if a := <-answer; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a cancelled wait answered %s, %v; want context.Canceled", a.task.Status, a.err)
	}
	if n := f.ends.Waiters(); n != 0 {
		t.Errorf("the hub holds %d waiters after the cancel, want 0", n)
	}
}

// TestWaitPolling: without Changes, a waiter reads the task's state, backing off, until it ends,
// then answers the whole task with one read.
func TestWaitPolling(t *testing.T) {
	f := newWaitFixture(t, false, frontend.Config{MaxWait: time.Hour, WaitPollFirst: time.Millisecond, WaitPollMax: 4 * time.Millisecond})
	f.schedule(t, "a")
	// The waiter's reads are counted apart: it may read the task before this goroutine, done
	// cancelling, could look.
	answer := f.waitFor(context.WithValue(ctx, byWaiter{}, true), "a", time.Hour)
	for f.store.stateGets.Load() < 3 { // it has polled a few times
		runtime.Gosched()
	}
	if _, err := f.svc.Cancel(ctx, "echo", "a"); err != nil {
		t.Fatal(err)
	}
	a := <-answer
	if a.err != nil || a.task.Status != task.StatusCancelled {
		t.Fatalf("wait answered %s, %v; want the cancelled task", a.task.Status, a.err)
	}
	if n := f.store.waiterGets.Load(); n != 1 {
		t.Errorf("the waiter read the whole task %d times, want once, for its answer", n)
	}
}

// TestWaitPollingReads: a polling wait that sees no end reads the task at most as often as its
// backoff allows: reads at 0, 10, 30, 70, 110, 150 and 190 ms of a 200 ms wait (7 state reads),
// then the answer. So is the bound of docs/capacity.md computed: 28 state reads and one whole
// read for a 25 s wait at 100 ms doubling to 1 s.
func TestWaitPollingReads(t *testing.T) {
	f := newWaitFixture(t, false, frontend.Config{MaxWait: time.Hour, WaitPollFirst: 10 * time.Millisecond, WaitPollMax: 40 * time.Millisecond})
	f.schedule(t, "a")
	gets := f.store.gets.Load()
	if _, err := f.svc.Wait(ctx, "echo", "a", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := f.store.stateGets.Load(); n < 1 || n > pollReads(200*time.Millisecond, 10*time.Millisecond, 40*time.Millisecond) {
		t.Errorf("%d state reads in a 200 ms wait, want 1 to %d", n, pollReads(200*time.Millisecond, 10*time.Millisecond, 40*time.Millisecond))
	}
	if n := f.store.gets.Load() - gets; n != 1 {
		t.Errorf("%d whole reads, want 1, the answer", n)
	}
	if n := pollReads(frontend.MaxWait, frontend.DefaultWaitPollFirst, frontend.DefaultWaitPollMax); n != 28 {
		t.Errorf("a %s wait polls at most %d times; docs/capacity.md says 28", frontend.MaxWait, n)
	}
}

// pollReads is the most state reads a polling wait of d makes: a timer never fires early.
func pollReads(d, first, most time.Duration) int64 {
	n := int64(1)
	for at, interval := time.Duration(0), first; at+interval < d; interval = min(2*interval, most) {
		at += interval
		n++
	}
	return n
}

// TestWaitAnswersTheTaskNow: a wait that ends before the task answers the task as it stands
// then, not as the waiter first read it.
func TestWaitAnswersTheTaskNow(t *testing.T) {
	for _, withEnds := range []bool{true, false} {
		f := newWaitFixture(t, withEnds, frontend.Config{WaitPollFirst: time.Hour, WaitPollMax: time.Hour})
		f.schedule(t, "a") // no read
		parked := make(chan error, 1)
		go func() {
			// Once the waiter has read the task, a transition that does not end it.
			for f.store.gets.Load()+f.store.stateGets.Load() == 0 {
				runtime.Gosched()
			}
			_, err := task.Apply(ctx, f.store, "echo", "a", func(tk task.Task) (task.Task, error) {
				tk.Parked, tk.Version = true, tk.Version+1
				return tk, nil
			})
			parked <- err
		}()
		tk, err := f.svc.Wait(ctx, "echo", "a", 500*time.Millisecond)
		if perr := <-parked; perr != nil {
			t.Fatal(perr)
		}
		if err != nil || tk.Status != task.StatusNew || !tk.Parked {
			t.Errorf("ends %v: wait answered %s parked %v, %v; want the task as the transition left it", withEnds, tk.Status, tk.Parked, err)
		}
	}
}
