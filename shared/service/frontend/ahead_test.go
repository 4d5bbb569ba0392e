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
		Queue:   q, SendFirst: true,
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

	// A replay sends its message before its create finds the task: one too many, which its
	// claim drops.
	if _, created, err := f.svc.Schedule(ctx, "echo", task.Spec{ID: "now"}); err != nil || created || len(q.ids()) != 3 {
		t.Fatalf("replay: created %v, %v, sent %v; want the stored task and one more message", created, err, q.ids())
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

// TestSendAheadFails: a send that fails leaves the task stored as it would be without sending
// ahead, new and due at its run time, for the consumer, which is woken: nothing is lost, and a
// message that went all the same finds its task new, so its claim drops it.
func TestSendAheadFails(t *testing.T) {
	f, q := aheadFixture(t, 0)
	q.fail = true
	in := 10 * time.Minute
	tk := f.schedule("echo", task.Spec{ID: "x", Delay: &in})
	got := f.stored("echo", "x")
	if tk.Status != task.StatusNew || got.Status != task.StatusNew || !got.NextTriggerAt.Equal(t0.Add(in).UTC()) || got.NotBefore != nil || f.notices != 1 {
		t.Fatalf("stored %s due %s, %d wake-ups; want new, due at its run time, the consumer woken", got.Status, got.NextTriggerAt, f.notices)
	}
}

// sendFirstStore is a store that checks, at each create, that the message of every task created
// enqueued was sent already, with the task's nonce; with bury set, a claim that found no task
// came before the first create and buried its message.
type sendFirstStore struct {
	task.Store
	q       *sentQueue
	bury    int // how many of the first creates find their message buried
	creates int
	unsent  []string
}

func (s *sendFirstStore) check(tasks []task.Task) {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	for _, t := range tasks {
		if t.Status != task.StatusEnqueued {
			continue
		}
		if t.Nonce == "" || !slices.ContainsFunc(s.q.sent, func(m task.Message) bool { return m.TaskID == t.ID && m.Nonce == t.Nonce }) {
			s.unsent = append(s.unsent, t.ID)
		}
	}
}

func (s *sendFirstStore) Create(ctx context.Context, t task.Task) error {
	return s.CreateBatch(ctx, []task.Task{t})
}

func (s *sendFirstStore) CreateBatch(ctx context.Context, tasks []task.Task) error {
	s.check(tasks)
	if s.creates++; s.creates <= s.bury {
		if err := s.Bury(ctx, tasks[0].Lambda, tasks[0].ID, tasks[0].Nonce, t0.Add(task.TombstoneLife)); err != nil {
			return err
		}
	}
	return s.Store.CreateBatch(ctx, tasks)
}

// sendFirstFixture is aheadFixture over a sendFirstStore.
func sendFirstFixture(t *testing.T, bury int) (*fixture, *sentQueue, *sendFirstStore) {
	f, q := aheadFixture(t, 0)
	s := &sendFirstStore{Store: f.store, q: q, bury: bury}
	f.svc = frontend.New(s, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return f.now }, Notify: func() { f.notices++ }, Queue: q, SendFirst: true,
	})
	return f, q, s
}

// TestSendFirst: the message of a task sent ahead is sent before the task is created, alone or
// in a batch, each with a nonce of its own that the create carries; a task written first
// (due later) has none.
func TestSendFirst(t *testing.T) {
	f, q, s := sendFirstFixture(t, 0)
	f.schedule("echo", task.Spec{ID: "one"})
	in := 16 * time.Minute
	if _, _, err := f.svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "b1"}, {ID: "b2"}, {ID: "later", Delay: &in}}); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	sent := append([]task.Message(nil), q.sent...)
	q.mu.Unlock()
	nonces := map[string]bool{}
	for _, m := range sent {
		nonces[m.Nonce] = true
	}
	if len(s.unsent) > 0 || s.creates != 2 || len(sent) != 3 || len(nonces) != 3 || nonces[""] {
		t.Fatalf("created before their messages were sent: %v; %d creates; sent %+v; want 2 creates, 3 messages each with a nonce of its own", s.unsent, s.creates, sent)
	}
	if got := f.stored("echo", "later"); got.Status != task.StatusNew {
		t.Fatalf("a task due in 16 minutes: %s, want new", got.Status)
	}
}

// TestSendFirstBuried: a create whose message a claim found first, and buried, fails; the
// request then creates its tasks as built, new and due, for the consumer, which it wakes: one
// send per request, so that burials under load never multiply sends, claims and tombstones.
func TestSendFirstBuried(t *testing.T) {
	f, q, s := sendFirstFixture(t, 100)
	tasks, created, err := f.svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "y"}, {ID: "z"}})
	if err != nil || !created || s.creates != 2 || len(q.ids()) != 2 || f.notices != 1 {
		t.Fatalf("buried: %v, created %v, %d creates, sent %v, %d wake-ups; want created on the second create, 2 messages, the consumer woken", err, created, s.creates, q.ids(), f.notices)
	}
	for i, id := range []string{"y", "z"} {
		got := f.stored("echo", id)
		if got.Status != task.StatusNew || got.NextTriggerAt == nil || tasks[i].Status != task.StatusNew {
			t.Fatalf("task %s stored %s due %v; want new and due, for the consumer", id, got.Status, got.NextTriggerAt)
		}
	}
}

// TestSendFirstOff: without SendFirst (workers that predate nonces), a task sent ahead is written
// first, enqueued with no nonce (so with its resend trigger: dynamostore drops only a nonce's),
// and its message, with no nonce, sent after.
func TestSendFirstOff(t *testing.T) {
	f, q, s := sendFirstFixture(t, 0)
	f.svc = frontend.New(s, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return f.now }, Queue: q,
	})
	if tk := f.schedule("echo", task.Spec{ID: "x"}); tk.Status != task.StatusEnqueued {
		t.Fatalf("status %s, want enqueued", tk.Status)
	}
	q.mu.Lock()
	sent := append([]task.Message(nil), q.sent...)
	q.mu.Unlock()
	if len(s.unsent) != 1 || len(sent) != 1 || sent[0].Nonce != "" {
		t.Fatalf("created before sent: %v, sent %+v; want the create first, then one message with no nonce", s.unsent, sent)
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

// TestSendAheadUnknownOutcome: a create whose answer is lost (it may have landed) answers its
// error, its message sent already: a task that landed has it, and one that did not never will,
// since the message's claim buries its nonce.
func TestSendAheadUnknownOutcome(t *testing.T) {
	base, _ := aheadFixture(t, 0)
	q := &sentQueue{}
	svc := frontend.New(lostAnswer{base.store}, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return t0 }, Queue: q, SendFirst: true,
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

// TestSendAheadFailedSendRunsOnTime: a task whose send failed, stored new for the consumer, is
// sent by the pass that finds it due, not before; a claim before its run time is refused.
func TestSendAheadFailedSendRunsOnTime(t *testing.T) {
	f, q := aheadFixture(t, 0)
	q.fail = true
	in := 10 * time.Minute
	f.schedule("echo", task.Spec{ID: "soon", Delay: &in})
	q.fail = false
	c := consumer.New(f.store, q, consumer.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo", Concurrency: 1}.WithDefaults()},
		Now:     func() time.Time { return f.now },
	})
	f.now = f.now.Add(task.DefaultPollInterval + time.Second)
	if _, err := c.Sweep(ctx); err != nil || len(q.ids()) != 0 {
		t.Fatalf("a pass 10 minutes early: %v, sent %v; want nothing sent", err, q.ids())
	}
	if _, err := task.Claim(f.stored("echo", "soon"), "lease", f.now, task.Config{}.WithDefaults()); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("a claim of the task left new: %v, want ErrConflict", err)
	}
	f.now = t0.Add(in)
	if _, err := c.Sweep(ctx); err != nil || len(q.ids()) != 1 {
		t.Fatalf("the pass at its run time: %v, sent %v; want its message", err, q.ids())
	}
}
