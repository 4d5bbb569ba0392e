package dynamostore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// units adds up the read units DynamoDB reports for every call (dynamostore.Consumed), and counts
// the items of each transaction and the other writes' units. DynamoDB Local does not report a
// transaction's units per item (AWS charges 2 WRU per KB of each): its items are counted instead.
type units struct {
	mu          sync.Mutex
	read, write float64
	transacted  int
}

func (u *units) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("units", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			c := dynamostore.Consumed(out.Result)
			u.mu.Lock()
			defer u.mu.Unlock()
			u.read += c.Read
			if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
				u.transacted += len(tx.TransactItems)
			} else {
				u.write += c.Write
			}
			return out, md, err
		}), middleware.After)
	})
}

// spent is what the calls since the last take read, wrote outside transactions, and put in them.
type spent struct {
	read, write float64
	transacted  int
}

func (u *units) take() spent {
	u.mu.Lock()
	defer u.mu.Unlock()
	got := spent{u.read, u.write, u.transacted}
	u.read, u.write, u.transacted = 0, 0, 0
	return got
}

// TestLimitedStartUnits: what a start under a key's cap and rate reads and writes, as
// docs/capacity.md ("Limits") says: its strong reads, and one transaction of the task item and the
// limits' records (and a check of a stale holder it replaces), then the counter; a held start
// reads and writes nothing.
func TestLimitedStartUnits(t *testing.T) {
	m := newMetered(t, task.Limits{KeyConcurrency: 1, KeyRate: task.StartRate{Count: 1, Per: time.Second}})
	u, cfg, now := m.u, m.cfg, m.now
	a, b := m.enqueued("tenant-1"), m.enqueued("tenant-1")

	first, err := m.start(a, now)
	if err != nil {
		t.Fatal(err)
	}
	// Reads: the task item, the cap's record and the rate's (absent: 1 each). Writes: the task
	// item, the cap's record and the rate's in the transaction, then the counter, 1.
	if got, want := u.take(), (spent{read: 3, write: 1, transacted: 3}); got != want {
		t.Errorf("a start with a free place: %+v; want %+v", got, want)
	}

	if _, err := m.start(b, now.Add(2*time.Second)); !errors.Is(err, task.ErrHeld) {
		t.Fatalf("start under a full cap: %v; want ErrHeld", err)
	}
	// Reads: the task item, both records, and the one holder's task item. No write.
	if got, want := u.take(), (spent{read: 4}); got != want {
		t.Errorf("a start held by the cap: %+v; want %+v", got, want)
	}

	ended, err := task.Succeed(first, first.Lease, nil, now.Add(2*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.s.Update(t.Context(), ended, first.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := m.start(b, now.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Reads as when held; writes as with a free place, and the check of the stale holder.
	if got, want := u.take(), (spent{read: 4, write: 1, transacted: 4}); got != want {
		t.Errorf("a start over a stale holder: %+v; want %+v", got, want)
	}
}

// TestRateBookingUnits measures what a start held by a rate reads and writes to book its slot,
// and what the start on that booking then costs.
func TestRateBookingUnits(t *testing.T) {
	m := newMetered(t, task.Limits{Rate: task.StartRate{Count: 10, Per: time.Second}})
	u, now := m.u, m.now
	start := func(tk task.Task, at time.Time) error {
		_, err := m.start(tk, at)
		return err
	}
	a, b := m.enqueued(""), m.enqueued("")
	if err := start(a, now); err != nil {
		t.Fatal(err)
	}
	slot, ok := task.HeldUntil(start(b, now))
	if !ok {
		t.Fatal("b's start was not held with a slot")
	}
	// Reads: the task item and the rate's record. Writes: the slot on the task item and the
	// record's next start, in one transaction; no counter (the status stays).
	if got, want := u.take(), (spent{read: 2, transacted: 2}); got != want {
		t.Errorf("a start held by the rate, booking its slot: %+v; want %+v", got, want)
	}
	booked, err := m.s.Get(t.Context(), b.Lambda, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := start(booked, slot); err != nil {
		t.Fatalf("start on the booking: %v", err)
	}
	// Reads as when booking; writes: the task item alone, as an unlimited start, and the counter.
	if got, want := u.take(), (spent{read: 2, write: 2}); got != want {
		t.Errorf("a start on its booking: %+v; want %+v", got, want)
	}
}

// metered is a store on a table of its own whose calls u counts, with helpers that write an
// enqueued task (as the schedule path makes it: sent first, so no due entry) and start one under
// limits (as a claim that names its message does: no running entry), so that the units u counts
// are the limits' and the task item's.
type metered struct {
	t      *testing.T
	u      *units
	s      *dynamostore.Store
	cfg    task.Config
	now    time.Time
	limits task.Limits
}

func newMetered(t *testing.T, limits task.Limits) *metered {
	m := &metered{t: t, u: &units{}, cfg: task.Config{}.WithDefaults(), now: time.Now().UTC(), limits: limits}
	db, table := newTable(t, nil, m.u.option)
	m.s = newStore(t, db, dynamostore.Config{Table: table})
	return m
}

func (m *metered) enqueued(key string) task.Task {
	m.t.Helper()
	tk, err := task.New(task.Spec{ID: task.NewID(m.now), Payload: []byte(`{"to":"a@example.com"}`), Key: key}, task.Lambda{Name: "send-email"}.WithDefaults(), m.now, m.cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	enq, msg, err := task.EnqueueAhead(tk, m.now, m.cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	enq, _ = task.SendFirst(enq, msg)
	if err := m.s.Create(m.t.Context(), enq); err != nil {
		m.t.Fatal(err)
	}
	return enq
}

// start claims tk at at under the limits and writes it, counting from the write on.
func (m *metered) start(tk task.Task, at time.Time) (task.Task, error) {
	m.t.Helper()
	claimed, err := task.Claim(tk, task.NewLease(), at, m.cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	claimed = claimed.TimedBy("message-" + tk.ID)
	claimed.Limits = m.limits
	m.u.take()
	return claimed, m.s.Update(m.t.Context(), claimed, tk.Version)
}
