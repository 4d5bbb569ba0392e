package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

func limitsCases() []struct {
	name string
	fn   func(*testing.T, task.Store)
} {
	return []struct {
		name string
		fn   func(*testing.T, task.Store)
	}{
		{"LimitKeyConcurrencyRace", testLimitKeyConcurrencyRace},
		{"LimitStaleHolder", testLimitStaleHolder},
		{"LimitOwnPlace", testLimitOwnPlace},
		{"LimitLowered", testLimitLowered},
		{"LimitNoKey", testLimitNoKey},
		{"LimitMaxRunning", testLimitMaxRunning},
		{"LimitRate", testLimitRate},
		{"LimitKeyRate", testLimitKeyRate},
		{"LimitConflictWins", testLimitConflictWins},
		{"LimitRateBookingRace", testLimitRateBookingRace},
		{"LimitRateBookedStarts", testLimitRateBookedStarts},
		{"LimitRateBookingExpires", testLimitRateBookingExpires},
		{"LimitCapBooksNothing", testLimitCapBooksNothing},
		{"LimitKeyRateBooking", testLimitKeyRateBooking},
	}
}

// limited is a lambda's tasks under limits: each created enqueued, and started by start.
type limited struct {
	t      *testing.T
	s      task.Store
	lambda string
	limits task.Limits
	now    time.Time
	cfg    task.Config
}

func newLimited(t *testing.T, s task.Store, l task.Limits) *limited {
	return &limited{t: t, s: s, lambda: lambdaName(), limits: l, now: base(), cfg: task.Config{}.WithDefaults()}
}

// enqueued creates a task of key (none if empty), enqueued, and returns it as stored.
func (lt *limited) enqueued(id, key string) task.Task {
	lt.t.Helper()
	tk := plain(lt.lambda, id, lt.now)
	tk.Key = key
	create(lt.t, lt.s, tk)
	enq, err := task.Enqueue(tk, lt.now, lt.cfg)
	if err != nil {
		lt.t.Fatal(err)
	}
	if err := lt.s.Update(lt.t.Context(), enq, tk.Version); err != nil {
		lt.t.Fatalf("Update %s to enqueued: %v", id, err)
	}
	return enq
}

// claim is the start of tk at the given time, under the limits, as the claim writes it.
func (lt *limited) claim(tk task.Task, at time.Time) task.Task {
	lt.t.Helper()
	claimed, err := task.Claim(tk, task.NewLease(), at, lt.cfg)
	if err != nil {
		lt.t.Fatal(err)
	}
	claimed.Limits = lt.limits
	return claimed
}

// start writes tk's start at the given time, and returns the task written and the outcome.
func (lt *limited) start(tk task.Task, at time.Time) (task.Task, error) {
	lt.t.Helper()
	claimed := lt.claim(tk, at)
	err := lt.s.Update(lt.t.Context(), claimed, tk.Version)
	claimed.Limits = task.Limits{}
	return claimed, err
}

// mustStart fails unless tk starts at the given time.
func (lt *limited) mustStart(tk task.Task, at time.Time) task.Task {
	lt.t.Helper()
	started, err := lt.start(tk, at)
	if err != nil {
		lt.t.Fatalf("start %s: %v; want it started", tk.ID, err)
	}
	return started
}

// mustHold fails unless tk's start at the given time is held by the limit named, until until
// (zero: none said), and writes nothing: the task stays as it was, its attempts uncounted.
func (lt *limited) mustHold(tk task.Task, at time.Time, limit string, until time.Time) {
	lt.t.Helper()
	_, err := lt.start(tk, at)
	lt.mustBeHeld(tk, err, limit, until)
}

func (lt *limited) mustBeHeld(tk task.Task, err error, limit string, until time.Time) {
	lt.t.Helper()
	lt.heldBy(tk, err, limit, until)
	mustEqual(lt.t, lt.s, tk)
}

func (lt *limited) heldBy(tk task.Task, err error, limit string, until time.Time) {
	lt.t.Helper()
	var held *task.Held
	if !errors.As(err, &held) || !errors.Is(err, task.ErrHeld) {
		lt.t.Fatalf("start %s: %v; want it held by the %s", tk.ID, err, limit)
	}
	if held.Limit != limit || !held.Until.Equal(until) {
		lt.t.Errorf("start %s: held by %q until %v; want %q until %v", tk.ID, held.Limit, held.Until, limit, until)
	}
}

// mustBook fails unless tk's start at the given time is held by the rate named until slot, and
// books it: the task is as it was, but for the slot and its version. It returns the task as
// stored.
func (lt *limited) mustBook(tk task.Task, at time.Time, limit string, slot time.Time) task.Task {
	lt.t.Helper()
	_, err := lt.start(tk, at)
	return lt.mustBeBooked(tk, err, limit, slot)
}

func (lt *limited) mustBeBooked(tk task.Task, err error, limit string, slot time.Time) task.Task {
	lt.t.Helper()
	lt.heldBy(tk, err, limit, slot)
	booked := tk
	booked.RateSlot, booked.Version = &slot, tk.Version+1
	mustEqual(lt.t, lt.s, booked)
	return booked
}

// testLimitKeyConcurrencyRace: of racing starts of KeyConcurrency+1 tasks of one key, exactly
// KeyConcurrency succeed and the rest are held; a task of another key starts alongside; once a
// holder ends, one more starts.
func testLimitKeyConcurrencyRace(t *testing.T, s task.Store) {
	const n = 3
	lt := newLimited(t, s, task.Limits{KeyConcurrency: n})
	tasks := make([]task.Task, n+1)
	for i := range tasks {
		tasks[i] = lt.enqueued("k"+string(rune('a'+i)), "tenant-1")
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		started = make([]task.Task, len(tasks))
		errs    = make([]error, len(tasks))
	)
	for i, tk := range tasks {
		claimed := lt.claim(tk, lt.now.Add(time.Second))
		wg.Go(func() {
			<-start
			errs[i] = s.Update(t.Context(), claimed, tk.Version)
			claimed.Limits = task.Limits{}
			started[i] = claimed
		})
	}
	close(start)
	wg.Wait()
	var heldIdx []int
	for i, err := range errs {
		switch {
		case err == nil:
			mustEqual(t, s, started[i])
		case errors.Is(err, task.ErrHeld):
			heldIdx = append(heldIdx, i)
			lt.mustBeHeld(tasks[i], err, "key_concurrency", time.Time{})
		default:
			t.Errorf("start %s: %v; want it started or held", tasks[i].ID, err)
		}
	}
	if len(heldIdx) != 1 {
		t.Fatalf("%d starts held; want exactly 1 of %d under key concurrency %d", len(heldIdx), len(tasks), n)
	}
	held := tasks[heldIdx[0]]
	lt.mustStart(lt.enqueued("other", "tenant-2"), lt.now.Add(time.Second))

	// A holder's end frees its place: the task held starts.
	holder := started[(heldIdx[0]+1)%len(tasks)]
	done, err := task.Succeed(holder, holder.Lease, nil, lt.now.Add(2*time.Second), lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	done.Limits = lt.limits // carried on from the start: only a start is under them
	if err := s.Update(t.Context(), done, holder.Version); err != nil {
		t.Fatalf("Update %s to succeeded: %v", holder.ID, err)
	}
	lt.mustStart(held, lt.now.Add(3*time.Second))
	lt.mustHold(lt.enqueued("late", "tenant-1"), lt.now.Add(3*time.Second), "key_concurrency", time.Time{})
}

// testLimitStaleHolder: a holder that timed out no longer holds its place: the next start takes
// it, and the holder, enqueued again, waits for a place like any task.
func testLimitStaleHolder(t *testing.T, s task.Store) {
	ctx := t.Context()
	lt := newLimited(t, s, task.Limits{KeyConcurrency: 1})
	a, b := lt.enqueued("a", "tenant-1"), lt.enqueued("b", "tenant-1")
	startedA := lt.mustStart(a, lt.now)
	lt.mustHold(b, lt.now, "key_concurrency", time.Time{})

	// a's worker is lost: its lease times out, and a waits for its retry.
	late := lt.now.Add(lt.cfg.HeartbeatTimeout + time.Second)
	timedOut, err := task.Timeout(startedA, late, lt.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, timedOut, startedA.Version); err != nil {
		t.Fatalf("Update a to timed out: %v", err)
	}
	startedB := lt.mustStart(b, late)

	// a, enqueued again, waits for b; once b ends, a starts again, and the cap still holds: c
	// waits.
	due := *timedOut.NextTriggerAt
	retry, err := task.Enqueue(timedOut, due, lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, retry, timedOut.Version); err != nil {
		t.Fatalf("Update a to enqueued: %v", err)
	}
	lt.mustHold(retry, due, "key_concurrency", time.Time{})
	done, err := task.Succeed(startedB, startedB.Lease, nil, due, lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, done, startedB.Version); err != nil {
		t.Fatalf("Update b to succeeded: %v", err)
	}
	again := lt.mustStart(retry, due)
	if again.Attempts != 2 {
		t.Errorf("a started again with %d attempts; want 2", again.Attempts)
	}
	lt.mustHold(lt.enqueued("c", "tenant-1"), due, "key_concurrency", time.Time{})
}

// testLimitOwnPlace: a task that timed out and starts again, its place of before still its own,
// takes that place again, under each cap, and holds it as one.
func testLimitOwnPlace(t *testing.T, s task.Store) {
	ctx := t.Context()
	lt := newLimited(t, s, task.Limits{KeyConcurrency: 1, MaxRunning: 1})
	started := lt.mustStart(lt.enqueued("a", "tenant-1"), lt.now)
	late := lt.now.Add(lt.cfg.HeartbeatTimeout + time.Second)
	timedOut, err := task.Timeout(started, late, lt.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, timedOut, started.Version); err != nil {
		t.Fatalf("Update a to timed out: %v", err)
	}
	due := *timedOut.NextTriggerAt
	retry, err := task.Enqueue(timedOut, due, lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, retry, timedOut.Version); err != nil {
		t.Fatalf("Update a to enqueued: %v", err)
	}
	lt.mustStart(retry, due)
	lt.mustHold(lt.enqueued("b", "tenant-1"), due, "key_concurrency", time.Time{})
	lt.mustHold(lt.enqueued("c", "tenant-2"), due, "max_running", time.Time{})
}

// testLimitLowered: a cap lowered far below the places its record holds, all stale, still lets a
// start take one, and then holds the next at the new cap.
func testLimitLowered(t *testing.T, s task.Store) {
	ctx := t.Context()
	lt := newLimited(t, s, task.Limits{KeyConcurrency: task.MaxLimitConcurrency})
	for i := range task.MaxLimitConcurrency {
		started := lt.mustStart(lt.enqueued(fmt.Sprintf("t%03d", i), "tenant-1"), lt.now)
		done, err := task.Succeed(started, started.Lease, nil, lt.now, lt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, done, started.Version); err != nil {
			t.Fatalf("Update %s to succeeded: %v", started.ID, err)
		}
	}
	lt.limits = task.Limits{KeyConcurrency: 1}
	lt.mustStart(lt.enqueued("x", "tenant-1"), lt.now)
	lt.mustHold(lt.enqueued("y", "tenant-1"), lt.now, "key_concurrency", time.Time{})
}

// testLimitNoKey: KeyConcurrency and KeyRate do not cap tasks without a key.
func testLimitNoKey(t *testing.T, s task.Store) {
	lt := newLimited(t, s, task.Limits{KeyConcurrency: 1, KeyRate: task.StartRate{Count: 1, Per: time.Hour}})
	for _, id := range []string{"a", "b", "c"} {
		lt.mustStart(lt.enqueued(id, ""), lt.now)
	}
}

// testLimitMaxRunning: MaxRunning caps the lambda's running tasks across keys, and those without.
func testLimitMaxRunning(t *testing.T, s task.Store) {
	lt := newLimited(t, s, task.Limits{MaxRunning: 2, KeyConcurrency: 2})
	lt.mustStart(lt.enqueued("a", "tenant-1"), lt.now)
	lt.mustStart(lt.enqueued("b", ""), lt.now)
	lt.mustHold(lt.enqueued("c", "tenant-2"), lt.now, "max_running", time.Time{})
	lt.mustHold(lt.enqueued("d", ""), lt.now, "max_running", time.Time{})
}

// testLimitRate: starts under a rate are spaced by its interval, from the start before: a start
// sooner is held until then, exactly.
func testLimitRate(t *testing.T, s task.Store) {
	rate := task.StartRate{Count: 2, Per: time.Second} // one start every 500ms
	lt := newLimited(t, s, task.Limits{Rate: rate})
	first := lt.mustStart(lt.enqueued("a", "tenant-1"), lt.now)
	// Its end, the limits carried on from the start, is no start: no rate holds it.
	ended, err := task.Succeed(first, first.Lease, nil, lt.now.Add(time.Millisecond), lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ended.Limits = lt.limits
	if err := s.Update(t.Context(), ended, first.Version); err != nil {
		t.Fatalf("Update a to succeeded: %v", err)
	}
	b := lt.enqueued("b", "tenant-2")
	due := first.StartedAt.Add(rate.Interval())
	booked := lt.mustBook(b, lt.now.Add(rate.Interval()-time.Millisecond), "rate", due)
	lt.mustStart(booked, due)
	lt.mustBook(lt.enqueued("c", ""), due, "rate", due.Add(rate.Interval()))
}

// testLimitKeyRate: each key has its own KeyRate.
func testLimitKeyRate(t *testing.T, s task.Store) {
	rate := task.StartRate{Count: 1, Per: time.Minute}
	lt := newLimited(t, s, task.Limits{KeyRate: rate})
	lt.mustStart(lt.enqueued("a1", "tenant-1"), lt.now)
	lt.mustStart(lt.enqueued("b1", "tenant-2"), lt.now)
	// Its key's next start is a minute away, beyond task.RateBookAhead: held until it is that
	// near, booking nothing; then it books.
	a2 := lt.enqueued("a2", "tenant-1")
	lt.mustHold(a2, lt.now.Add(time.Second), "key_rate", lt.now.Add(time.Minute-task.RateBookAhead))
	lt.mustBook(a2, lt.now.Add(time.Minute-task.RateBookAhead), "key_rate", lt.now.Add(time.Minute))
}

// testLimitConflictWins: a start from a version that moved on is a conflict, also when a limit
// would hold it.
func testLimitConflictWins(t *testing.T, s task.Store) {
	lt := newLimited(t, s, task.Limits{KeyConcurrency: 1, Rate: task.StartRate{Count: 1, Per: time.Hour}})
	lt.mustStart(lt.enqueued("a", "tenant-1"), lt.now)
	b := lt.enqueued("b", "tenant-1")
	stale := b
	stale.Version--
	claimed := lt.claim(stale, lt.now)
	if err := s.Update(t.Context(), claimed, stale.Version); !errors.Is(err, task.ErrConflict) || errors.Is(err, task.ErrHeld) {
		t.Errorf("start from an old version: %v; want ErrConflict", err)
	}
	mustEqual(t, s, b)
}

// testLimitRateBookingRace: of racing starts of n tasks under a rate, one starts and each other
// is held: it books its own slot, or, if a racing booking took the record first (DynamoDB), is
// held unbooked until a slot it may book then. The slots booked are distinct, an interval apart,
// the first ones after the start.
func testLimitRateBookingRace(t *testing.T, s task.Store) {
	const n = 4
	rate := task.StartRate{Count: 10, Per: time.Second} // one start every 100ms
	lt := newLimited(t, s, task.Limits{Rate: rate})
	tasks := make([]task.Task, n)
	for i := range tasks {
		tasks[i] = lt.enqueued(fmt.Sprintf("r%d", i), "")
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i, tk := range tasks {
		claimed := lt.claim(tk, lt.now)
		wg.Go(func() {
			<-start
			errs[i] = s.Update(t.Context(), claimed, tk.Version)
		})
	}
	close(start)
	wg.Wait()
	slots := map[time.Time]string{}
	started := 0
	for i, err := range errs {
		var held *task.Held
		switch {
		case err == nil:
			started++
		case errors.As(err, &held):
			got, gerr := s.Get(t.Context(), tasks[i].Ref().Lambda, tasks[i].ID)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if got.RateSlot == nil { // held unbooked: unchanged, until a slot after the start
				lt.mustBeHeld(tasks[i], err, "rate", held.Until)
				if held.Until.Before(lt.now.Add(rate.Interval())) {
					t.Errorf("%s held unbooked until %v; want a slot after the start's", tasks[i].ID, held.Until)
				}
				continue
			}
			if other, taken := slots[held.Until]; taken {
				t.Errorf("%s and %s booked the same slot %v", other, tasks[i].ID, held.Until)
			}
			slots[held.Until] = tasks[i].ID
			lt.mustBeBooked(tasks[i], err, "rate", held.Until)
		default:
			t.Errorf("start %s: %v; want it started or held", tasks[i].ID, err)
		}
	}
	if started != 1 {
		t.Errorf("%d of %d racing starts started; want 1", started, n)
	}
	if started+len(slots) < 2 {
		t.Errorf("%d started and %d booked of %d racing starts; want one started and one booked at least", started, len(slots), n)
	}
	for k := 1; k <= len(slots); k++ {
		if at := lt.now.Add(time.Duration(k) * rate.Interval()); slots[at] == "" {
			t.Errorf("no task booked the slot %v; booked: %v", at, slots)
		}
	}
}

// testLimitRateBookedStarts: a task that booked a slot is held until it, booking nothing more,
// and starts at it, taking no turn of the rate, while a task without a booking is held; its
// booking is used once: it is cleared by the start, and a claim from the booked version after
// it is a conflict.
func testLimitRateBookedStarts(t *testing.T, s task.Store) {
	rate := task.StartRate{Count: 2, Per: time.Second} // one start every 500ms
	i := rate.Interval()
	lt := newLimited(t, s, task.Limits{Rate: rate})
	lt.mustStart(lt.enqueued("a", ""), lt.now)
	booked := lt.mustBook(lt.enqueued("b", ""), lt.now, "rate", lt.now.Add(i))
	lt.mustHold(booked, lt.now.Add(i-time.Millisecond), "rate", lt.now.Add(i))
	// The hold before its slot booked nothing: the next slot is the one after b's.
	lt.mustBook(lt.enqueued("c", ""), lt.now.Add(i), "rate", lt.now.Add(2*i))
	started := lt.mustStart(booked, lt.now.Add(i))
	if started.RateSlot != nil {
		t.Errorf("b started with its slot %v still set; want it cleared", started.RateSlot)
	}
	// Its start took no turn: the next is after c's.
	lt.mustBook(lt.enqueued("d", ""), lt.now.Add(i), "rate", lt.now.Add(3*i))
	if _, err := lt.start(booked, lt.now.Add(i)); !errors.Is(err, task.ErrConflict) {
		t.Errorf("a second start on b's booking: %v; want ErrConflict", err)
	}
	mustEqual(t, s, started)
}

// testLimitRateBookingExpires: a booking not used within task.RateSlotGrace of its slot has
// expired: the claim checks the rate again, and books again.
func testLimitRateBookingExpires(t *testing.T, s task.Store) {
	rate := task.StartRate{Count: 2, Per: time.Second} // one start every 500ms
	i := rate.Interval()
	lt := newLimited(t, s, task.Limits{Rate: rate})
	lt.mustStart(lt.enqueued("a", ""), lt.now)
	slot := lt.now.Add(i)
	booked := lt.mustBook(lt.enqueued("b", ""), lt.now, "rate", slot)
	// c takes the turn due as b's booking expires; b, come too late, books the next.
	late := slot.Add(task.RateSlotGrace)
	lt.mustStart(lt.enqueued("c", ""), late)
	lt.mustBook(booked, late.Add(time.Millisecond), "rate", late.Add(i))
}

// testLimitCapBooksNothing: a start held by a concurrency cap books no slot of the rate it is
// also under, and writes nothing; a task booked ahead is held until its slot before any cap is
// read, and at its slot a full cap holds it, its booking kept.
func testLimitCapBooksNothing(t *testing.T, s task.Store) {
	ctx := t.Context()
	rate := task.StartRate{Count: 2, Per: time.Second} // one start every 500ms
	i := rate.Interval()
	lt := newLimited(t, s, task.Limits{MaxRunning: 1, Rate: rate})
	a := lt.mustStart(lt.enqueued("a", ""), lt.now)
	b := lt.enqueued("b", "")
	lt.mustHold(b, lt.now.Add(time.Millisecond), "max_running", time.Time{})
	done, err := task.Succeed(a, a.Lease, nil, lt.now.Add(2*time.Millisecond), lt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, done, a.Version); err != nil {
		t.Fatalf("Update a to succeeded: %v", err)
	}
	// The first slot after a's start is b's to book: the cap's hold took none.
	b = lt.mustBook(b, lt.now.Add(3*time.Millisecond), "rate", lt.now.Add(i))
	c := lt.mustBook(lt.enqueued("c", ""), lt.now.Add(4*time.Millisecond), "rate", lt.now.Add(2*i))
	// b starts on its booking and takes the cap's place. c, booked ahead, is held until its slot,
	// not by the cap: no claim before its slot reads the cap.
	lt.mustStart(b, lt.now.Add(i))
	lt.mustHold(c, lt.now.Add(i+time.Millisecond), "rate", lt.now.Add(2*i))
	// At its slot, the cap holds it, its booking kept for when the cap has room.
	lt.mustHold(c, lt.now.Add(2*i), "max_running", time.Time{})
}

// testLimitKeyRateBooking: under a key's rate and the lambda's, a task books both at the later
// of their next starts when that is the lambda's; a task whose key's next start is later is held
// until it and books nothing, so that the lambda's next start does not jump ahead to one key's.
func testLimitKeyRateBooking(t *testing.T, s task.Store) {
	rate := task.StartRate{Count: 2, Per: time.Second} // the lambda: one start every 500ms
	keyRate := task.StartRate{Count: 1, Per: time.Minute}
	i := rate.Interval()
	lt := newLimited(t, s, task.Limits{Rate: rate, KeyRate: keyRate})
	lt.mustStart(lt.enqueued("a1", "tenant-1"), lt.now)
	lt.mustHold(lt.enqueued("a2", "tenant-1"), lt.now.Add(time.Millisecond), "key_rate", lt.now.Add(time.Minute))
	lt.mustBook(lt.enqueued("b1", "tenant-2"), lt.now.Add(time.Millisecond), "rate", lt.now.Add(i))
	lt.mustBook(lt.enqueued("c1", "tenant-3"), lt.now.Add(time.Millisecond), "rate", lt.now.Add(2*i))
	// b1's booking took tenant-2's turn too: its next start is a minute after b1's slot.
	lt.mustHold(lt.enqueued("b2", "tenant-2"), lt.now.Add(time.Second), "key_rate", lt.now.Add(i+time.Minute))
}
