package frontend_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// sentQueue records what is sent to it, and fails every Send while fail is set.
type sentQueue struct {
	mu   sync.Mutex
	sent []task.Message
	fail bool
}

func (q *sentQueue) Send(_ context.Context, msgs ...task.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail {
		return errors.New("queue down")
	}
	q.sent = append(q.sent, msgs...)
	return nil
}

func (q *sentQueue) Receive(context.Context, task.ReceiveParams) ([]task.Delivery, error) {
	return nil, nil
}
func (q *sentQueue) Delete(context.Context, task.Delivery) error                { return nil }
func (q *sentQueue) Extend(context.Context, task.Delivery, time.Duration) error { return nil }

func (q *sentQueue) ids() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var ids []string
	for _, m := range q.sent {
		ids = append(ids, m.TaskID)
	}
	return ids
}

// aheadFixture is a service that sends ahead to q, over the embedded store, with a clock the test
// moves; its lambda "echo" may have at most capacity tasks enqueued.
func aheadFixture(t *testing.T, capacity int) (*fixture, *sentQueue) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q := &sentQueue{}
	f := &fixture{t: t, store: store, now: t0}
	f.svc = frontend.New(store, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1, MaxEnqueued: capacity}.WithDefaults()},
		Now:     func() time.Time { return f.now },
		Notify:  func() { f.notices++ },
		Queue:   q,
	})
	return f, q
}

// TestSendAhead: a task due within 15 minutes is stored enqueued and its message sent by the
// request, delayed to its run time; one due later, or one that waits for an upstream, is stored
// as before for the consumer, which is woken only for those.
func TestSendAhead(t *testing.T) {
	f, q := aheadFixture(t, 0)
	now := f.schedule("echo", task.Spec{ID: "now"})
	in := 10 * time.Minute
	soon := f.schedule("echo", task.Spec{ID: "soon", Delay: &in})
	if now.Status != task.StatusEnqueued || soon.Status != task.StatusEnqueued || f.notices != 0 {
		t.Fatalf("due now %s, in 10 min %s, %d wake-ups; want both enqueued and no wake-up", now.Status, soon.Status, f.notices)
	}
	if got := f.stored("echo", "soon"); got.Status != task.StatusEnqueued || !got.NextTriggerAt.Equal(t0.Add(in).Add(task.DefaultEnqueueTimeout).UTC()) {
		t.Fatalf("stored: %s due %s, want enqueued, resent an enqueue timeout after its run time", got.Status, got.NextTriggerAt)
	}
	q.mu.Lock()
	sent := append([]task.Message(nil), q.sent...)
	q.mu.Unlock()
	if len(sent) != 2 || sent[0].Delay != 0 || sent[1].Delay != in || sent[1].RunAt == nil || !sent[1].RunAt.Equal(t0.Add(in)) {
		t.Fatalf("sent %+v, want now undelayed and soon delayed 10 min to its run time", sent)
	}

	far := 16 * time.Minute
	late := f.schedule("echo", task.Spec{ID: "late", Delay: &far})
	after := f.schedule("echo", task.Spec{ID: "after", After: []task.Ref{{ID: "now"}}})
	if late.Status != task.StatusNew || after.Status != task.StatusPending || len(q.ids()) != 2 || f.notices != 2 {
		t.Fatalf("due in 16 min %s, after an upstream %s, sent %v, %d wake-ups; want new and pending, nothing more sent, the consumer woken twice",
			late.Status, after.Status, q.ids(), f.notices)
	}

	// A replay sends nothing more.
	if _, created, err := f.svc.Schedule(ctx, "echo", task.Spec{ID: "now"}); err != nil || created || len(q.ids()) != 2 {
		t.Fatalf("replay: created %v, %v, sent %v; want the stored task and no message", created, err, q.ids())
	}
}

// TestSendAheadGates: the schedule path sends nothing that a gate holds, and sees a gate set
// within a second (the claim checks the gates again: status.TestClaimHeldByGate).
func TestSendAheadGates(t *testing.T) {
	f, q := aheadFixture(t, 0)
	if _, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Collection: "held", Mode: task.GatePause}); err != nil {
		t.Fatal(err)
	}
	held := f.schedule("echo", task.Spec{ID: "h", Collection: "held"})
	open := f.schedule("echo", task.Spec{ID: "o", Collection: "other"})
	if held.Status != task.StatusNew || open.Status != task.StatusEnqueued || len(q.ids()) != 1 {
		t.Fatalf("paused collection %s, other %s, sent %v; want new, enqueued, one message", held.Status, open.Status, q.ids())
	}
	if _, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Mode: task.GateDrop}); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Second) // the snapshot of the gates is a second old
	if tk := f.schedule("echo", task.Spec{ID: "d"}); tk.Status != task.StatusNew || len(q.ids()) != 1 {
		t.Fatalf("dropping lambda: %s, sent %v; want new, for the consumer to drop", tk.Status, q.ids())
	}
}

// TestSendAheadCap: the schedule path sends no more than the lambda's room under its cap on
// enqueued tasks; the rest wait in the store for the consumer, which admits them as room opens.
func TestSendAheadCap(t *testing.T) {
	f, q := aheadFixture(t, 3)
	specs := make([]task.Spec, 5)
	for i := range specs {
		specs[i] = task.Spec{ID: string(rune('a' + i))}
	}
	tasks, created, err := f.svc.ScheduleBatch(ctx, "echo", specs)
	if err != nil || !created {
		t.Fatal(created, err)
	}
	var statuses []task.Status
	for _, tk := range tasks {
		statuses = append(statuses, tk.Status)
	}
	want := []task.Status{task.StatusEnqueued, task.StatusEnqueued, task.StatusEnqueued, task.StatusNew, task.StatusNew}
	if len(q.ids()) != 3 || f.notices != 1 || !slices.Equal(statuses, want) {
		t.Fatalf("statuses %v, sent %v, %d wake-ups; want %v, 3 sent, the consumer woken", statuses, q.ids(), f.notices, want)
	}
	f.now = f.now.Add(time.Second)
	if tk := f.schedule("echo", task.Spec{ID: "f"}); tk.Status != task.StatusNew {
		t.Fatalf("a lambda at its cap: %s, want new", tk.Status)
	}
}

// TestSendAheadFails: a send that fails leaves the tasks stored, due again after a poll interval
// for the consumer to send, and the request succeeds: nothing is lost.
func TestSendAheadFails(t *testing.T) {
	f, q := aheadFixture(t, 0)
	q.fail = true
	tk := f.schedule("echo", task.Spec{ID: "x"})
	got := f.stored("echo", "x")
	if tk.Status != task.StatusEnqueued || got.Status != task.StatusEnqueued || !got.NextTriggerAt.Equal(t0.Add(task.DefaultPollInterval).UTC()) || f.notices != 1 {
		t.Fatalf("stored %s due %s, %d wake-ups; want enqueued, due in a poll interval, the consumer woken", got.Status, got.NextTriggerAt, f.notices)
	}
}

// TestSendAheadReplayResends: a replay that finds its task still as created (enqueued, never
// moved) sends its message again, since the first request may have ended between its write and
// its send; once the task moved, a replay sends nothing.
func TestSendAheadReplayResends(t *testing.T) {
	f, q := aheadFixture(t, 0)
	f.schedule("echo", task.Spec{ID: "x"})
	if _, created, err := f.svc.Schedule(ctx, "echo", task.Spec{ID: "x"}); err != nil || created || len(q.ids()) != 2 {
		t.Fatalf("replay of a task as created: created %v, %v, sent %v; want its message again", created, err, q.ids())
	}
	claimed, err := task.Claim(f.stored("echo", "x"), "lease", f.now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Update(ctx, claimed, claimed.Version-1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Schedule(ctx, "echo", task.Spec{ID: "x"}); err != nil || len(q.ids()) != 2 {
		t.Fatalf("replay of a claimed task: %v, sent %v; want nothing sent", err, q.ids())
	}
}

// lostAnswer is a store whose creates land but answer an error whose outcome is unknown.
type lostAnswer struct{ task.Store }

func (s lostAnswer) Create(ctx context.Context, t task.Task) error {
	if err := s.Store.Create(ctx, t); err != nil {
		return err
	}
	return errors.New("request timed out")
}

// TestSendAheadUnknownOutcome: a create whose answer is lost (it may have landed) sends its
// message all the same: without it, a task that landed would wait an enqueue timeout for the
// consumer's resend. A message for a task that did not land fails its claim.
func TestSendAheadUnknownOutcome(t *testing.T) {
	base, _ := aheadFixture(t, 0)
	q := &sentQueue{}
	svc := frontend.New(lostAnswer{base.store}, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return t0 }, Queue: q,
	})
	if _, _, err := svc.Schedule(ctx, "echo", task.Spec{ID: "x"}); err == nil || len(q.ids()) != 1 {
		t.Fatalf("lost answer: %v, sent %v; want the error and the message", err, q.ids())
	}
}

// TestSendAheadLaterHalfCap: tasks due later than now take at most half of the lambda's cap, so
// that tasks due now keep room while those wait in flight.
func TestSendAheadLaterHalfCap(t *testing.T) {
	f, q := aheadFixture(t, 4)
	in := 10 * time.Minute
	for _, id := range []string{"l1", "l2", "l3"} {
		f.schedule("echo", task.Spec{ID: id, Delay: &in})
	}
	if got := f.stored("echo", "l3"); len(q.ids()) != 2 || got.Status != task.StatusNew {
		t.Fatalf("3 tasks due later under a cap of 4: sent %v, the third %s; want 2 sent, the third new", q.ids(), got.Status)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		f.schedule("echo", task.Spec{ID: id})
	}
	if got := f.stored("echo", "n3"); len(q.ids()) != 4 || got.Status != task.StatusNew {
		t.Fatalf("then 3 due now: sent %v, the third %s; want the other half of the cap used", q.ids(), got.Status)
	}
}

// TestSendAheadResendKeepsRunTime: a task sent ahead whose send failed is resent by the consumer's
// next pass, delayed to its run time still, and a claim before then is refused: no resend or
// duplicate runs it early.
func TestSendAheadResendKeepsRunTime(t *testing.T) {
	f, q := aheadFixture(t, 0)
	q.fail = true
	in := 10 * time.Minute
	f.schedule("echo", task.Spec{ID: "soon", Delay: &in})
	q.fail = false
	f.now = f.now.Add(task.DefaultPollInterval + time.Second)
	c := consumer.New(f.store, q, consumer.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return f.now },
	})
	if _, err := c.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	runAt := t0.Add(in)
	q.mu.Lock()
	sent := append([]task.Message(nil), q.sent...)
	q.mu.Unlock()
	if len(sent) != 1 || sent[0].RunAt == nil || !sent[0].RunAt.Equal(runAt) || sent[0].Delay != runAt.Sub(f.now) {
		t.Fatalf("resent %+v at %s; want one message delayed to %s", sent, f.now, runAt)
	}
	if _, err := task.Claim(f.stored("echo", "soon"), "lease", f.now, task.Config{}.WithDefaults()); !errors.Is(err, task.ErrNotDue) {
		t.Fatalf("a claim 10 minutes early: %v, want ErrNotDue", err)
	}
}
