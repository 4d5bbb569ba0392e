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
	ctx := t.Context()
	var u units
	db, table := newTable(t, nil, u.option)
	s := newStore(t, db, dynamostore.Config{Table: table})
	limits := task.Limits{KeyConcurrency: 1, KeyRate: task.StartRate{Count: 1, Per: time.Second}}
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	// As the schedule path makes them (sent first: no due entry) and a claim that names its
	// message starts them (no running entry): the units below are the limits' and the task item's.
	enqueued := func(id string) task.Task {
		tk, err := task.New(task.Spec{ID: id, Payload: []byte(`{"to":"a@example.com"}`), Key: "tenant-1"}, task.Lambda{Name: "send-email"}.WithDefaults(), now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		enq, m, err := task.EnqueueAhead(tk, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		enq, _ = task.SendFirst(enq, m)
		if err := s.Create(ctx, enq); err != nil {
			t.Fatal(err)
		}
		return enq
	}
	start := func(tk task.Task, at time.Time) (task.Task, error) {
		claimed, err := task.Claim(tk, task.NewLease(), at, cfg)
		if err != nil {
			t.Fatal(err)
		}
		claimed = claimed.TimedBy("message-" + tk.ID)
		claimed.Limits = limits
		u.take()
		return claimed, s.Update(ctx, claimed, tk.Version)
	}
	a, b := enqueued(task.NewID(now)), enqueued(task.NewID(now))

	first, err := start(a, now)
	if err != nil {
		t.Fatal(err)
	}
	// Reads: the task item, the cap's record and the rate's (absent: 1 each). Writes: the task
	// item, the cap's record and the rate's in the transaction, then the counter, 1.
	if got, want := u.take(), (spent{read: 3, write: 1, transacted: 3}); got != want {
		t.Errorf("a start with a free place: %+v; want %+v", got, want)
	}

	if _, err := start(b, now.Add(2*time.Second)); !errors.Is(err, task.ErrHeld) {
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
	if err := s.Update(ctx, ended, first.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := start(b, now.Add(2*time.Second)); err != nil {
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
	ctx := t.Context()
	var u units
	db, table := newTable(t, nil, u.option)
	s := newStore(t, db, dynamostore.Config{Table: table})
	limits := task.Limits{Rate: task.StartRate{Count: 10, Per: time.Second}}
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	enqueued := func(id string) task.Task {
		tk, err := task.New(task.Spec{ID: id, Payload: []byte(`{"to":"a@example.com"}`)}, task.Lambda{Name: "send-email"}.WithDefaults(), now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		enq, m, err := task.EnqueueAhead(tk, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		enq, _ = task.SendFirst(enq, m)
		if err := s.Create(ctx, enq); err != nil {
			t.Fatal(err)
		}
		return enq
	}
	start := func(tk task.Task, at time.Time) error {
		claimed, err := task.Claim(tk, task.NewLease(), at, cfg)
		if err != nil {
			t.Fatal(err)
		}
		claimed = claimed.TimedBy("message-" + tk.ID)
		claimed.Limits = limits
		u.take()
		return s.Update(ctx, claimed, tk.Version)
	}
	a, b := enqueued(task.NewID(now)), enqueued(task.NewID(now))
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
	booked, err := s.Get(ctx, b.Lambda, b.ID)
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
