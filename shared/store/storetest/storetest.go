// Package storetest is the conformance suite of task.Store: every backend's tests call Exercise,
// so the embedded store and the cloud store behave alike.
//
// The suite may run against a shared database (such as one DynamoDB table): every subtest works
// on a lambda name of its own and never assumes the store is empty.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Exercise runs the suite. newStore returns a store for one subtest; the caller closes it, for
// example in t.Cleanup.
func Exercise(t *testing.T, newStore func(t *testing.T) task.Store, opts ...Option) {
	c := config{fan: task.MaxAfter}
	for _, o := range opts {
		o(&c)
	}
	cases := []struct {
		name string
		fn   func(*testing.T, task.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Key", testKey},
		{"CreateExists", testCreateExists},
		{"CreateBatch", testCreateBatch},
		{"GetMissing", testGetMissing},
		{"UpdateConditional", testUpdateConditional},
		{"ClaimRace", testClaimRace},
		{"List", testList},
		{"ListDefaultLimit", testListDefaultLimit},
		{"ListSparse", testListSparse},
		{"Due", testDue},
		{"DueParked", testDueParked},
		{"Triggered", testTriggered},
		{"Counts", testCounts},
		{"GatheredCounts", testGatheredCounts},
		{"Gates", testGates},
		{"NotBefore", testNotBefore},
		{"Bury", testBury},
		{"CancelRequested", testCancelRequested},
		{"HandBacks", testHandBacks},
		{"Snooze", testSnooze},
		{"MessageTimesLease", testMessageTimesLease},
		{"Redrive", testRedrive},
		{"ListFailed", testListFailed},
		{"History", testHistory},
		{"HistoryBounded", testHistoryBounded},
		{"HistoryLog", func(t *testing.T, s task.Store) { testHistoryLog(t, s, c.logs) }},
	}
	cases = append(cases, flowCases(c)...)
	cases = append(cases, scheduleCases()...)
	cases = append(cases, transactCases(c)...)
	cases = append(cases, limitsCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore(t))
		})
	}
}

// lambdaName returns a lambda name no other subtest uses.
func lambdaName() string { return "st-" + strings.ToLower(rand.Text()[:12]) }

// base is a time for test tasks: microsecond precision is all a backend must keep.
func base() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func ptr(t time.Time) *time.Time { return &t }

// full returns a task with every field set.
func full(lambda, id string, now time.Time) task.Task {
	return task.Task{
		ID: id, Lambda: lambda, Collection: "coll-1", Priority: "high", Status: task.StatusProcessing,
		Payload: []byte(`{"n":1,"s":"x"}`), Result: []byte(`{"ok":true}`), Error: "previous attempt failed",
		Attempts: 2, MaxAttempts: 7,
		RunAt: now.Add(-time.Minute), Deadline: ptr(now.Add(time.Hour)), NextTriggerAt: ptr(now.Add(30 * time.Second)),
		CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now, Version: 5,
		Lease: "lease-abc", Spec: "spec-fingerprint",
		AttemptSeq: 3, StartedAt: ptr(now.Add(-10 * time.Second)), EndedAt: ptr(now.Add(-5 * time.Second)), Worker: "executor-1",
		LogLocation: &task.LogLocation{Group: "/aws/lambda/worker-echo", Stream: "executor-1", RequestID: "req-1"},
		Snoozes:     2,
		RateSlot:    ptr(now.Add(3 * time.Second)),
	}
}

// plain returns a task of status new with only the fields every task has.
func plain(lambda, id string, created time.Time) task.Task {
	return task.Task{
		ID: id, Lambda: lambda, Priority: "normal", Status: task.StatusNew, MaxAttempts: 5,
		RunAt: created, NextTriggerAt: ptr(created), CreatedAt: created, UpdatedAt: created, Version: 1,
	}
}

// diff lists the fields in which got differs from want.
func diff(want, got task.Task) []string {
	var d []string
	check := func(field string, ok bool, w, g any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w))
		}
	}
	timeEq := func(field string, w, g time.Time) {
		check(field, w.Equal(g), w, g)
		if !g.IsZero() && g.Location() != time.UTC {
			d = append(d, fmt.Sprintf("%s: got location %s, want UTC", field, g.Location()))
		}
	}
	ptrEq := func(field string, w, g *time.Time) {
		switch {
		case w == nil || g == nil:
			check(field, w == nil && g == nil, w, g)
		default:
			timeEq(field, *w, *g)
		}
	}
	check("ID", want.ID == got.ID, want.ID, got.ID)
	check("Lambda", want.Lambda == got.Lambda, want.Lambda, got.Lambda)
	check("Collection", want.Collection == got.Collection, want.Collection, got.Collection)
	check("Key", want.Key == got.Key, want.Key, got.Key)
	check("Priority", want.Priority == got.Priority, want.Priority, got.Priority)
	check("Status", want.Status == got.Status, want.Status, got.Status)
	check("Payload", bytes.Equal(want.Payload, got.Payload), string(want.Payload), string(got.Payload))
	check("Result", bytes.Equal(want.Result, got.Result), string(want.Result), string(got.Result))
	check("Error", want.Error == got.Error, want.Error, got.Error)
	check("Attempts", want.Attempts == got.Attempts, want.Attempts, got.Attempts)
	check("MaxAttempts", want.MaxAttempts == got.MaxAttempts, want.MaxAttempts, got.MaxAttempts)
	timeEq("RunAt", want.RunAt, got.RunAt)
	ptrEq("Deadline", want.Deadline, got.Deadline)
	ptrEq("NextTriggerAt", want.NextTriggerAt, got.NextTriggerAt)
	timeEq("CreatedAt", want.CreatedAt, got.CreatedAt)
	timeEq("UpdatedAt", want.UpdatedAt, got.UpdatedAt)
	check("Version", want.Version == got.Version, want.Version, got.Version)
	check("Lease", want.Lease == got.Lease, want.Lease, got.Lease)
	check("Spec", want.Spec == got.Spec, want.Spec, got.Spec)
	check("Parked", want.Parked == got.Parked, want.Parked, got.Parked)
	check("After", slices.Equal(want.After, got.After), want.After, got.After)
	check("AfterCount", want.AfterCount == got.AfterCount, want.AfterCount, got.AfterCount)
	check("Trigger", want.Trigger == got.Trigger, want.Trigger, got.Trigger)
	check("Settled", bytes.Equal(want.Settled, got.Settled), want.Settled, got.Settled)
	check("Downstream", want.Downstream == got.Downstream, want.Downstream, got.Downstream)
	check("NotifyCursor", want.NotifyCursor == got.NotifyCursor, want.NotifyCursor, got.NotifyCursor)
	check("CancelRequested", want.CancelRequested == got.CancelRequested, want.CancelRequested, got.CancelRequested)
	ptrEq("NotBefore", want.NotBefore, got.NotBefore)
	ptrEq("RateSlot", want.RateSlot, got.RateSlot)
	check("HandBacks", want.HandBacks == got.HandBacks, want.HandBacks, got.HandBacks)
	check("Snoozes", want.Snoozes == got.Snoozes, want.Snoozes, got.Snoozes)
	check("AttemptSeq", want.AttemptSeq == got.AttemptSeq, want.AttemptSeq, got.AttemptSeq)
	ptrEq("StartedAt", want.StartedAt, got.StartedAt)
	ptrEq("EndedAt", want.EndedAt, got.EndedAt)
	check("Worker", want.Worker == got.Worker, want.Worker, got.Worker)
	check("LogLocation", reflect.DeepEqual(want.LogLocation, got.LogLocation), want.LogLocation, got.LogLocation)
	return d
}

func create(t *testing.T, s task.Store, tasks ...task.Task) {
	t.Helper()
	for _, tk := range tasks {
		if err := s.Create(t.Context(), tk); err != nil {
			t.Fatalf("Create %s/%s: %v", tk.Lambda, tk.ID, err)
		}
	}
}

// mustEqual fails unless the stored task equals want in every field.
func mustEqual(t *testing.T, s task.Store, want task.Task) {
	t.Helper()
	got, err := s.Get(t.Context(), want.Lambda, want.ID)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", want.Lambda, want.ID, err)
	}
	if d := diff(want, got); len(d) > 0 {
		t.Errorf("Get %s/%s differs from what was written:\n  %s", want.Lambda, want.ID, strings.Join(d, "\n  "))
	}
}

func ids(tasks []task.Task) []string {
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = tk.ID
	}
	return out
}

func testRoundTrip(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	// Set in another zone: the store must keep the instant and hand it back in UTC.
	zoned := full(l, "full", now.In(time.FixedZone("UTC+5", 5*3600)))
	bare := plain(l, "bare", now) // nil Deadline, Payload, Result
	terminal := plain(l, "terminal", now)
	terminal.Status, terminal.NextTriggerAt, terminal.Payload = task.StatusSuccess, nil, []byte(`[1,2,3]`)
	parked := plain(l, "parked", now)
	parked.Collection, parked.Parked = "held", true
	create(t, s, zoned, bare, terminal, parked)
	mustEqual(t, s, zoned)
	mustEqual(t, s, bare)
	mustEqual(t, s, terminal)
	mustEqual(t, s, parked)
	unparked := parked
	unparked.Parked, unparked.Version = false, parked.Version+1
	if err := s.Update(t.Context(), unparked, parked.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, unparked)

	// Update writes the fields too: clear the pointers of the full task, set those of the bare one.
	cleared := zoned
	cleared.Deadline, cleared.NextTriggerAt, cleared.Result, cleared.Lease = nil, nil, nil, ""
	cleared.Status, cleared.Error, cleared.Version = task.StatusDead, "gave up", zoned.Version+1
	if err := s.Update(t.Context(), cleared, zoned.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, cleared)

	// Every field but the payload: Create sets it once, and Update leaves it as it is.
	filled := full(l, "bare", now.Add(time.Second))
	filled.Version = bare.Version + 1
	if err := s.Update(t.Context(), filled, bare.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	filled.Payload = bare.Payload
	mustEqual(t, s, filled)
}

func testCreateExists(t *testing.T, s task.Store) {
	l, other, now := lambdaName(), lambdaName(), base()
	orig := full(l, "dup", now)
	create(t, s, orig)

	again := plain(l, "dup", now.Add(time.Second))
	again.Payload = []byte(`{"different":true}`)
	if err := s.Create(t.Context(), again); !errors.Is(err, task.ErrExists) {
		t.Fatalf("Create of an existing id: got %v, want ErrExists", err)
	}
	mustEqual(t, s, orig)

	// The same id under another lambda is another task.
	elsewhere := plain(other, "dup", now)
	create(t, s, elsewhere)
	mustEqual(t, s, elsewhere)
	mustEqual(t, s, orig)
}

func testCreateBatch(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	var batch []task.Task
	for i := range task.MaxBatch {
		tk := plain(l, fmt.Sprintf("b%03d", i), now.Add(time.Duration(i)*time.Microsecond))
		if i%2 == 1 {
			tk = full(l, tk.ID, now)
		}
		batch = append(batch, tk)
	}
	batch[7].Lambda = other // a batch may span lambdas
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Fatalf("CreateBatch of %d tasks: %v", len(batch), err)
	}
	for _, tk := range batch {
		mustEqual(t, s, tk)
	}
	if err := s.CreateBatch(ctx, nil); err != nil {
		t.Errorf("CreateBatch of no tasks: %v", err)
	}

	// All or nothing: a batch with one taken id creates none of the others.
	fresh := []task.Task{plain(l, "x1", now), plain(l, "b050", now), plain(l, "x2", now)}
	err := s.CreateBatch(ctx, fresh)
	if !errors.Is(err, task.ErrExists) || !strings.Contains(err.Error(), "b050") {
		t.Errorf("CreateBatch with a taken id: got %v, want ErrExists naming b050", err)
	}
	mustEqual(t, s, batch[50])

	twice := []task.Task{plain(l, "x1", now), plain(l, "x1", now.Add(time.Second))}
	if err := s.CreateBatch(ctx, twice); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("CreateBatch with an id twice: got %v, want ErrInvalid", err)
	}
	over := make([]task.Task, task.MaxBatch+1)
	for i := range over {
		over[i] = plain(l, fmt.Sprintf("x%d", i), now)
	}
	if err := s.CreateBatch(ctx, over); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("CreateBatch of %d tasks: got %v, want ErrInvalid", len(over), err)
	}
	for _, id := range []string{"x0", "x1", "x2"} {
		if _, err := s.Get(ctx, l, id); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("Get %s after failed batches: got %v, want ErrNotFound", id, err)
		}
	}
}

func testGetMissing(t *testing.T, s task.Store) {
	l, other := lambdaName(), lambdaName()
	create(t, s, plain(l, "here", base()))
	for _, c := range []struct{ lambda, id string }{{l, "absent"}, {other, "here"}, {lambdaName(), "x"}} {
		if _, err := s.Get(t.Context(), c.lambda, c.id); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("Get %s/%s: got %v, want ErrNotFound", c.lambda, c.id, err)
		}
	}
}

func testUpdateConditional(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	v1 := plain(l, "cond", now)
	create(t, s, v1)

	v2 := v1
	v2.Status, v2.Version, v2.UpdatedAt = task.StatusEnqueued, 2, now.Add(time.Second)
	if err := s.Update(t.Context(), v2, 1); err != nil {
		t.Fatalf("Update from the stored version: %v", err)
	}
	mustEqual(t, s, v2)

	// A writer that read version 1 is too late. A store that tells the task as it found it
	// (task.Changed, for Apply to retry without a read) tells the stored one.
	stale := v1
	stale.Status, stale.Version, stale.Error = task.StatusCancelled, 2, "stale writer"
	err := s.Update(t.Context(), stale, 1)
	if !errors.Is(err, task.ErrConflict) {
		t.Fatalf("Update from a stale version: got %v, want ErrConflict", err)
	}
	var changed *task.Changed
	if errors.As(err, &changed) {
		if d := diff(v2, changed.Current); len(d) > 0 || !changed.Whole {
			t.Errorf("the conflict's task differs from the stored one (whole: %v): %s", changed.Whole, strings.Join(d, "; "))
		}
	}
	// So is one that claims a version the task never had.
	ahead := v2
	ahead.Version = 10
	if err := s.Update(t.Context(), ahead, 9); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("Update from a future version: got %v, want ErrConflict", err)
	}
	mustEqual(t, s, v2)

	// Update never creates.
	ghost := plain(l, "ghost", now)
	ghost.Version = 2
	err = s.Update(t.Context(), ghost, 1)
	if !errors.Is(err, task.ErrConflict) {
		t.Fatalf("Update of a missing task: got %v, want ErrConflict", err)
	}
	if errors.As(err, &changed) {
		t.Errorf("Update of a missing task tells a task as found: %+v", changed.Current)
	}
	if _, err := s.Get(t.Context(), l, "ghost"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("Get after Update of a missing task: got %v, want ErrNotFound", err)
	}
}

// testClaimRace is where duplicates die: many workers claim one task from the same version, and
// exactly one may own it.
func testClaimRace(t *testing.T, s task.Store) {
	const workers = 50
	ctx := t.Context()
	l := task.Lambda{Name: lambdaName()}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := base()
	tk, err := task.New(task.Spec{Payload: []byte(`{"race":true}`)}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, tk)
	enq, err := task.Enqueue(tk, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enq, tk.Version); err != nil {
		t.Fatalf("Update to enqueued: %v", err)
	}

	var (
		read, done sync.WaitGroup
		start      = make(chan struct{})
		leases     = make([]string, workers)
		errs       = make([]error, workers)
	)
	read.Add(workers)
	done.Add(workers)
	for i := range workers {
		go func() {
			defer done.Done()
			got, err := s.Get(ctx, l.Name, tk.ID)
			var claimed task.Task
			if err == nil {
				leases[i] = task.NewLease()
				claimed, err = task.Claim(got, leases[i], now.Add(time.Second), cfg)
			}
			read.Done()
			<-start // every worker has read the same version before anyone writes
			if err == nil {
				err = s.Update(ctx, claimed, got.Version)
			}
			errs[i] = err
		}()
	}
	read.Wait()
	close(start)
	done.Wait()

	winner := oneWinner(t, "worker", "claimed the task", errs)
	got, err := s.Get(ctx, l.Name, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.StatusProcessing || got.Lease != leases[winner] || got.Attempts != 1 || got.Version != enq.Version+1 {
		t.Errorf("stored task: status %s, lease %q, attempts %d, version %d; want processing, %q, 1, %d",
			got.Status, got.Lease, got.Attempts, got.Version, leases[winner], enq.Version+1)
	}
}

func testList(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	// Creation order is CreatedAt, then ID; ties on CreatedAt are deliberate. They are written
	// out of order, so a store that returns insertion order fails.
	specs := []struct {
		id     string
		offset time.Duration
		status task.Status
		coll   string
	}{
		{"a", 0, task.StatusNew, "red"},
		{"b", time.Second, task.StatusEnqueued, "red"},
		{"c", time.Second, task.StatusNew, ""},
		{"d", time.Second, task.StatusNew, "blue"},
		{"e", 2 * time.Second, task.StatusSuccess, "red"},
		{"f", 3 * time.Second, task.StatusNew, "red"},
		{"g", 3 * time.Second, task.StatusNew, "blue"},
		{"h", 4 * time.Microsecond, task.StatusEnqueued, ""},
		{"i", 5 * time.Second, task.StatusNew, "red"},
	}
	byID := map[string]task.Task{}
	for _, i := range []int{5, 2, 8, 0, 7, 3, 1, 6, 4} {
		sp := specs[i]
		tk := plain(l, sp.id, now.Add(sp.offset))
		tk.Status, tk.Collection = sp.status, sp.coll
		create(t, s, tk)
		byID[sp.id] = tk
	}
	// Another lambda with the same statuses and collections must not show up.
	create(t, s, plain(other, "a", now), plain(other, "z", now))

	for _, c := range []struct {
		name string
		p    task.ListParams
		want []string
	}{
		{"all", task.ListParams{}, []string{"a", "h", "b", "c", "d", "e", "f", "g", "i"}},
		{"status", task.ListParams{Status: task.StatusNew}, []string{"a", "c", "d", "f", "g", "i"}},
		{"collection", task.ListParams{Collection: "red"}, []string{"a", "b", "e", "f", "i"}},
		{"both", task.ListParams{Status: task.StatusNew, Collection: "red"}, []string{"a", "f", "i"}},
		{"none", task.ListParams{Status: task.StatusDead}, nil},
		{"statuses", task.ListParams{Statuses: []task.Status{task.StatusEnqueued, task.StatusSuccess}}, []string{"h", "b", "e"}},
		{"status and statuses", task.ListParams{Status: task.StatusSuccess, Statuses: []task.Status{task.StatusEnqueued}}, []string{"h", "b", "e"}},
		{"statuses and collection", task.ListParams{Statuses: []task.Status{task.StatusNew, task.StatusSuccess}, Collection: "red"}, []string{"a", "e", "f", "i"}},
		{"created range", task.ListParams{CreatedFrom: now.Add(time.Second), CreatedTo: now.Add(3 * time.Second)}, []string{"b", "c", "d", "e"}},
		{"created from, status", task.ListParams{Status: task.StatusNew, CreatedFrom: now.Add(time.Second)}, []string{"c", "d", "f", "g", "i"}},
		{"created to, statuses, collection", task.ListParams{Statuses: []task.Status{task.StatusNew, task.StatusEnqueued}, Collection: "red", CreatedTo: now.Add(3 * time.Second)}, []string{"a", "b"}},
		{"empty range", task.ListParams{CreatedFrom: now.Add(3 * time.Second), CreatedTo: now.Add(time.Second)}, nil},
	} {
		for _, limit := range []int{task.MaxListLimit, 1, 2, 4} {
			p := c.p
			p.Lambda, p.Limit = l, limit
			var got []string
			for page := 0; ; page++ {
				if page > len(specs)+1 {
					t.Fatalf("%s, limit %d: the cursor never ends", c.name, limit)
				}
				tasks, next, err := s.List(ctx, p)
				if err != nil {
					t.Fatalf("%s, limit %d: List: %v", c.name, limit, err)
				}
				if len(tasks) > limit {
					t.Errorf("%s, limit %d: page of %d tasks", c.name, limit, len(tasks))
				}
				for _, tk := range tasks {
					if d := diff(byID[tk.ID], tk); tk.Lambda != l || len(d) > 0 {
						t.Errorf("%s: List returned %s/%s differing from what was written: %v", c.name, tk.Lambda, tk.ID, d)
					}
				}
				got = append(got, ids(tasks)...)
				if next == "" {
					break
				}
				// A page may be short, or empty, and still have a cursor (see testListSparse).
				p.Cursor = next
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s, limit %d: got %v, want %v", c.name, limit, got, c.want)
			}
		}
	}

	for _, cursor := range []string{"not a cursor!", "%%%", "\x00"} {
		if _, _, err := s.List(ctx, task.ListParams{Lambda: l, Cursor: cursor}); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("List with cursor %q: got %v, want ErrInvalid", cursor, err)
		}
	}
}

func testListDefaultLimit(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	n := task.DefaultListLimit + 3
	var want []string
	for i := range n {
		tk := plain(l, fmt.Sprintf("t%04d", i), now.Add(time.Duration(i)*time.Millisecond))
		create(t, s, tk)
		want = append(want, tk.ID)
	}
	first, next, err := s.List(ctx, task.ListParams{Lambda: l})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != task.DefaultListLimit || next == "" {
		t.Fatalf("List with limit 0: got %d tasks and next %q, want %d and a cursor", len(first), next, task.DefaultListLimit)
	}
	rest, next, err := s.List(ctx, task.ListParams{Lambda: l, Cursor: next})
	if err != nil {
		t.Fatal(err)
	}
	if next != "" {
		t.Errorf("last page: got next %q, want none", next)
	}
	if got := append(ids(first), ids(rest)...); !slices.Equal(got, want) {
		t.Errorf("pages: got %v, want %v", got, want)
	}
}

// testListSparse: filters that match few of many more tasks than a page's read budget. A page
// may hold fewer tasks than its limit, or none, with a cursor to go on (task.Store.List), but the
// pages hold every match once, in order, and they end: each page is full or has read on by about
// its budget.
func testListSparse(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	n := 6*task.ListParams{}.ReadBudget() + 50 // over the budget of each of a few shards
	type spec struct {
		status task.Status
		coll   string
	}
	// Random ids (creation time orders the tasks) spread them unevenly over a store's shards, as
	// real ones are: shards whose pages end at different places.
	rng := mrand.New(mrand.NewPCG(18, 8))
	var want = map[spec][]string{}
	var batch []task.Task
	for i := range n {
		sp := spec{task.StatusSuccess, "common"}
		switch {
		case i%151 == 7:
			sp = spec{task.StatusNew, "rare"}
		case i%173 == 11:
			sp = spec{task.StatusNew, "common"}
		case i%199 == 13:
			sp = spec{task.StatusSuccess, "rare"}
		}
		tk := plain(l, fmt.Sprintf("%016x", rng.Uint64()), now.Add(time.Duration(i)*time.Millisecond))
		tk.Status, tk.Collection = sp.status, sp.coll
		if tk.Status.Terminal() {
			tk.NextTriggerAt = nil
		}
		for _, f := range []spec{{sp.status, ""}, {"", sp.coll}, sp} {
			want[f] = append(want[f], tk.ID)
		}
		if batch = append(batch, tk); len(batch) == task.MaxBatch || i == n-1 {
			if err := s.CreateBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for _, f := range []spec{{task.StatusNew, ""}, {"", "rare"}, {task.StatusNew, "rare"}} {
		for _, limit := range []int{1, 3, 10, task.MaxListLimit} {
			p := task.ListParams{Lambda: l, Status: f.status, Collection: f.coll, Limit: limit}
			maxPages := len(want[f])/limit + n/p.ReadBudget() + 2
			var got []string
			for page := 1; ; page++ {
				if page > maxPages {
					t.Fatalf("%+v: still paging after %d pages, over %d tasks of which %d match", p, maxPages, n, len(want[f]))
				}
				tasks, next, err := s.List(ctx, p)
				if err != nil {
					t.Fatalf("%+v: List: %v", p, err)
				}
				if len(tasks) > limit {
					t.Errorf("%+v: page of %d tasks", p, len(tasks))
				}
				got = append(got, ids(tasks)...)
				if next == "" {
					break
				}
				p.Cursor = next
			}
			if !slices.Equal(got, want[f]) {
				t.Errorf("status %q, collection %q, limit %d: got %d tasks, want %d:\n  got %v\n  want %v", f.status, f.coll, limit, len(got), len(want[f]), got, want[f])
			}
		}
	}
}

func testDue(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	mk := func(lambda, id string, st task.Status, trigger time.Duration, prio, coll string) task.Task {
		tk := plain(lambda, id, now.Add(-time.Hour))
		tk.Status, tk.Priority, tk.Collection, tk.NextTriggerAt = st, prio, coll, ptr(now.Add(trigger))
		return tk
	}
	done := mk(l, "done", task.StatusSuccess, 0, "high", "")
	done.NextTriggerAt = nil
	dead := mk(l, "dead", task.StatusDead, 0, "normal", "")
	dead.NextTriggerAt = nil
	create(t, s,
		mk(l, "held", task.StatusNew, -4*time.Minute, "normal", "held"),
		mk(l, "a", task.StatusNew, -3*time.Minute, "high", ""),
		mk(l, "retry", task.StatusRetriableFailure, -2*time.Minute, "normal", "other"),
		mk(l, "b", task.StatusNew, -time.Minute, "normal", ""),
		mk(l, "sent", task.StatusEnqueued, -30*time.Second, "high", ""),
		mk(l, "now", task.StatusEnqueued, 0, "low", ""),
		mk(l, "future", task.StatusNew, time.Microsecond, "high", ""),
		mk(l, "running", task.StatusProcessing, -5*time.Minute, "high", ""),
		mk(other, "elsewhere", task.StatusNew, -10*time.Minute, "high", ""),
		done, dead,
	)
	ready := []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued}
	for _, c := range []struct {
		name string
		p    task.DueParams
		want []string
	}{
		{"ready", task.DueParams{Statuses: ready}, []string{"held", "a", "retry", "b", "sent", "now"}},
		{"skip", task.DueParams{Statuses: ready, SkipCollections: []string{"held", "nope"}}, []string{"a", "retry", "b", "sent", "now"}},
		{"priority", task.DueParams{Statuses: ready, Priority: "high"}, []string{"a", "sent"}},
		// The consumer's reads: enqueued tasks of every priority (their lane), and each
		// priority's tasks not yet enqueued.
		{"enqueued", task.DueParams{Statuses: []task.Status{task.StatusEnqueued}}, []string{"sent", "now"}},
		{"enqueued, one priority", task.DueParams{Statuses: []task.Status{task.StatusEnqueued}, Priority: "low"}, []string{"now"}},
		{"not enqueued, one priority", task.DueParams{Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}, Priority: "high"}, []string{"a"}},
		{"priority skip", task.DueParams{Statuses: ready, Priority: "normal", SkipCollections: []string{"held"}}, []string{"retry", "b"}},
		{"limit", task.DueParams{Statuses: ready, Limit: 2}, []string{"held", "a"}},
		{"one status", task.DueParams{Statuses: []task.Status{task.StatusRetriableFailure}}, []string{"retry"}},
		{"running", task.DueParams{Statuses: task.Running}, []string{"running"}},
		{"every status", task.DueParams{Statuses: task.Statuses}, []string{"running", "held", "a", "retry", "b", "sent", "now"}},
		{"earlier", task.DueParams{Statuses: task.Statuses, Before: now.Add(-3 * time.Minute)}, []string{"running", "held", "a"}},
		{"later", task.DueParams{Statuses: ready, Before: now.Add(time.Minute)}, []string{"held", "a", "retry", "b", "sent", "now", "future"}},
	} {
		p := c.p
		p.Lambda = l
		if p.Before.IsZero() {
			p.Before = now
		}
		if p.Limit == 0 {
			p.Limit = 100
		}
		tasks, err := s.Due(ctx, p)
		if err != nil {
			t.Fatalf("%s: Due: %v", c.name, err)
		}
		if got := ids(tasks); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
		for _, tk := range tasks {
			if tk.Lambda != l || tk.NextTriggerAt == nil || tk.NextTriggerAt.After(p.Before) {
				t.Errorf("%s: returned %s/%s with trigger %v, not due before %v", c.name, tk.Lambda, tk.ID, tk.NextTriggerAt, p.Before)
			}
		}
	}
}

// testTriggered: a lambda is triggered while any of its tasks has a next trigger, in whatever
// lane, due or not, parked or not; finished tasks (no trigger) and other lambdas' tasks count
// for nothing.
func testTriggered(t *testing.T, s task.Store) {
	ctx, now := t.Context(), base()
	triggered := func(lambda string, want bool, what string) {
		t.Helper()
		if got, err := s.Triggered(ctx, lambda); err != nil || got != want {
			t.Errorf("%s: Triggered = %v, %v; want %v", what, got, err, want)
		}
	}
	mk := func(lambda, id string, st task.Status, trigger *time.Time, parked bool) task.Task {
		tk := plain(lambda, id, now.Add(-time.Hour))
		tk.Status, tk.NextTriggerAt, tk.Parked, tk.Collection = st, trigger, parked, "c"
		return tk
	}
	idle := lambdaName()
	triggered(idle, false, "a lambda without tasks")
	create(t, s, mk(idle, "done", task.StatusSuccess, nil, false), mk(idle, "dead", task.StatusDead, nil, false))
	triggered(idle, false, "a lambda of finished tasks only")
	for _, c := range []struct {
		name    string
		status  task.Status
		trigger time.Time
		parked  bool
	}{
		{"due in a week", task.StatusNew, now.Add(7 * 24 * time.Hour), false},
		{"parked", task.StatusNew, now, true},
		{"enqueued", task.StatusEnqueued, now.Add(time.Hour), false},
		{"running", task.StatusProcessing, now.Add(time.Hour), false},
		{"pending", task.StatusPending, now, false},
	} {
		l := lambdaName()
		create(t, s, mk(l, "t", c.status, ptr(c.trigger), c.parked))
		triggered(l, true, c.name)
	}
	// A task that ends leaves its lambda idle.
	l := lambdaName()
	waiting := mk(l, "t", task.StatusRetriableFailure, ptr(now.Add(time.Minute)), false)
	create(t, s, waiting)
	triggered(l, true, "a retry")
	ended := waiting
	ended.Status, ended.NextTriggerAt, ended.Version = task.StatusDead, nil, waiting.Version+1
	if err := s.Update(ctx, ended, waiting.Version); err != nil {
		t.Fatal(err)
	}
	triggered(l, false, "its only task ended")
	triggered(idle, false, "a lambda beside busy ones")
}

// testDueParked: parked tasks are a lane of their own. The waiting lanes never return them; a
// parked read returns one collection's, or every collection's but those skipped; and a task
// unparked is back in its lane at its trigger.
func testDueParked(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	mk := func(id, coll string, trigger time.Duration, parked bool) task.Task {
		tk := plain(l, id, now.Add(-time.Hour))
		tk.Collection, tk.NextTriggerAt, tk.Parked = coll, ptr(now.Add(trigger)), parked
		return tk
	}
	p1 := mk("p1", "a", -3*time.Minute, true)
	create(t, s,
		p1,
		mk("p2", "a", -time.Minute, true),
		mk("p3", "a1", -2*time.Minute, true), // a collection whose name extends another's
		mk("p4", "b", -4*time.Minute, true),
		mk("p5", "b", time.Hour, true),
		mk("w1", "a", -5*time.Minute, false),
		mk("w2", "", -30*time.Second, false),
	)
	waiting := []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued}
	for _, c := range []struct {
		name string
		p    task.DueParams
		want []string
	}{
		{"waiting lane", task.DueParams{Statuses: waiting}, []string{"w1", "w2"}},
		{"waiting lane, one priority", task.DueParams{Statuses: waiting, Priority: "normal"}, []string{"w1", "w2"}},
		{"parked", task.DueParams{Statuses: waiting, Parked: true}, []string{"p4", "p1", "p3", "p2"}},
		{"parked later", task.DueParams{Statuses: waiting, Parked: true, Before: now.Add(2 * time.Hour)}, []string{"p4", "p1", "p3", "p2", "p5"}},
		{"one collection", task.DueParams{Statuses: waiting, Parked: true, Collection: "a"}, []string{"p1", "p2"}},
		{"skip", task.DueParams{Statuses: waiting, Parked: true, SkipCollections: []string{"a", "b"}}, []string{"p3"}},
		{"skip limit", task.DueParams{Statuses: waiting, Parked: true, SkipCollections: []string{"b"}, Limit: 2}, nil},
		{"running", task.DueParams{Statuses: task.Running, Parked: true}, nil},
	} {
		p := c.p
		p.Lambda = l
		if p.Before.IsZero() {
			p.Before = now
		}
		if p.Limit == 0 {
			p.Limit = 100
		}
		tasks, err := s.Due(ctx, p)
		if err != nil {
			t.Fatalf("%s: Due: %v", c.name, err)
		}
		got := ids(tasks)
		if c.name == "skip limit" {
			// Two of a's and a1's three, whichever the store meets first.
			if len(got) != 2 || slices.Contains(got, "p4") {
				t.Errorf("%s: got %v, want two of p1, p2, p3", c.name, got)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}

	unparked := p1
	unparked.Parked, unparked.Version = false, p1.Version+1
	if err := s.Update(ctx, unparked, p1.Version); err != nil {
		t.Fatal(err)
	}
	tasks, err := s.Due(ctx, task.DueParams{Lambda: l, Statuses: waiting, Before: now, Limit: 100})
	if got := ids(tasks); err != nil || !slices.Equal(got, []string{"w1", "p1", "w2"}) {
		t.Errorf("waiting lane after unparking p1: got %v, %v; want [w1 p1 w2]", got, err)
	}
}

func testCounts(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	var tasks []task.Task
	for i, st := range []task.Status{task.StatusNew, task.StatusNew, task.StatusNew, task.StatusEnqueued, task.StatusEnqueued, task.StatusSuccess} {
		tk := plain(l, fmt.Sprintf("c%d", i), now)
		tk.Status = st
		tasks = append(tasks, tk)
	}
	create(t, s, tasks...)
	for i := range 4 {
		create(t, s, plain(other, fmt.Sprintf("o%d", i), now))
	}
	want := map[task.Status]int{task.StatusNew: 3, task.StatusEnqueued: 2, task.StatusSuccess: 1}
	check := func() {
		t.Helper()
		got, err := s.Counts(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("Counts: got %v, want %v", got, want)
		}
	}
	check()

	// Counts follow updates, and a status with none left is absent.
	moved := tasks[5]
	moved.Status, moved.Version = task.StatusDropped, moved.Version+1
	if err := s.Update(ctx, moved, tasks[5].Version); err != nil {
		t.Fatal(err)
	}
	want = map[task.Status]int{task.StatusNew: 3, task.StatusEnqueued: 2, task.StatusDropped: 1}
	check()

	if got, err := s.Counts(ctx, lambdaName()); err != nil || len(got) != 0 {
		t.Errorf("Counts of a lambda without tasks: got %v, %v; want an empty map", got, err)
	}
}

// testGatheredCounts: the count moves of writes made together under task.GatherCounts (from
// many goroutines, as a status batch serves its requests) are all in Counts once flushed, also
// when the writers' context ended before the flush; a write under the context after the flush
// counts at once.
func testGatheredCounts(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	ctx, cancel := context.WithCancel(t.Context())
	gathered, flush := task.GatherCounts(ctx, s)
	const n = 12
	var batch []task.Task
	for i := range n / 2 {
		tk := plain(l, fmt.Sprintf("b%d", i), now)
		tk.Status = task.StatusEnqueued
		batch = append(batch, tk)
	}
	if err := s.CreateBatch(gathered, batch); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tk := plain(l, fmt.Sprintf("g%d", i), now)
			tk.Status = task.StatusEnqueued
			if i >= n/2 {
				tk = batch[i-n/2]
			} else if errs[i] = s.Create(gathered, tk); errs[i] != nil {
				return
			}
			// enqueued -> processing -> success, as a claim and a result move it.
			for _, st := range []task.Status{task.StatusProcessing, task.StatusSuccess} {
				next := tk
				next.Status, next.Version = st, tk.Version+1
				if errs[i] = s.Update(gathered, next, tk.Version); errs[i] != nil {
					return
				}
				tk = next
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	cancel() // the writers are gone; their writes are made, and the flush counts them
	flush()
	check := func(want map[task.Status]int) {
		t.Helper()
		got, err := s.Counts(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("Counts: got %v, want %v", got, want)
		}
	}
	check(map[task.Status]int{task.StatusSuccess: n})

	late := plain(l, "late", now)
	if err := s.Create(context.WithoutCancel(gathered), late); err != nil {
		t.Fatal(err)
	}
	check(map[task.Status]int{task.StatusSuccess: n, task.StatusNew: 1})
}

func testGates(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	set := func(lambda, coll, mode string, at time.Time) {
		t.Helper()
		if err := s.SetGate(ctx, task.Gate{Lambda: lambda, Collection: coll, Mode: mode, UpdatedAt: at}); err != nil {
			t.Fatalf("SetGate %s/%s %s: %v", lambda, coll, mode, err)
		}
	}
	// check compares the gates of l and other with want, in any order.
	check := func(step string, want ...task.Gate) {
		t.Helper()
		gates, err := s.Gates(ctx)
		if err != nil {
			t.Fatalf("%s: Gates: %v", step, err)
		}
		var got []task.Gate
		for _, g := range gates {
			if g.Lambda == l || g.Lambda == other {
				got = append(got, g)
			}
		}
		key := func(g task.Gate) string { return g.Lambda + "/" + g.Collection }
		byKey := func(a, b task.Gate) int { return strings.Compare(key(a), key(b)) }
		slices.SortFunc(got, byKey)
		slices.SortFunc(want, byKey)
		if len(got) != len(want) {
			t.Fatalf("%s: got gates %v, want %v", step, got, want)
		}
		for i := range want {
			if key(got[i]) != key(want[i]) || got[i].Mode != want[i].Mode || !got[i].UpdatedAt.Equal(want[i].UpdatedAt) {
				t.Errorf("%s: got gate %+v, want %+v", step, got[i], want[i])
			}
		}
	}
	gate := func(lambda, coll, mode string, at time.Time) task.Gate {
		return task.Gate{Lambda: lambda, Collection: coll, Mode: mode, UpdatedAt: at}
	}

	check("before any gate")
	set(other, "", task.GateOpen, now) // opening a gate that is not there is fine
	check("open only")

	set(l, "", task.GatePause, now)
	set(l, "c1", task.GateDrop, now)
	set(other, "c1", task.GatePause, now)
	check("set", gate(l, "", task.GatePause, now), gate(l, "c1", task.GateDrop, now), gate(other, "c1", task.GatePause, now))

	later := now.Add(time.Second)
	set(l, "", task.GateDrop, later)
	set(l, "c1", task.GatePause, later)
	check("replaced", gate(l, "", task.GateDrop, later), gate(l, "c1", task.GatePause, later), gate(other, "c1", task.GatePause, now))

	set(l, "c1", task.GateOpen, later)
	check("collection opened", gate(l, "", task.GateDrop, later), gate(other, "c1", task.GatePause, now))

	set(l, "", task.GateOpen, later)
	set(other, "c1", task.GateOpen, later)
	check("all opened")
}

// oneWinner fails unless exactly one of racing writes (errs) succeeded and the others lost with
// ErrConflict, and returns the winner's index. who names a racer, won what the winner did.
func oneWinner(t *testing.T, who, won string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("%ss %d and %d both %s", who, winner, i, won)
		case err == nil:
			winner = i
		case !errors.Is(err, task.ErrConflict):
			t.Errorf("%s %d: got %v, want nil or ErrConflict", who, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s %s", who, won)
	}
	return winner
}
