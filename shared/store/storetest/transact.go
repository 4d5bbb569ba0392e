package storetest

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TxCreate creates tk in one transaction of an app on s's database, beside a write of the app's
// own, and commits it if commit is set, else rolls it back (or has it cancelled). It returns the
// transaction's error, as the backend's transactional create names it: task.ErrExists for a
// taken id. It then does what an app does after a commit (dynamostore's Created).
type TxCreate func(t *testing.T, s task.Store, tk task.Task, commit bool) error

// Transact runs the transactional-enqueue case with create, the backend's way of writing a task
// in an app's own transaction (sqlitestore.CreateTx, dynamostore's CreateTransactItems).
func Transact(create TxCreate) Option { return func(c *config) { c.transact = create } }

func transactCases(c config) []struct {
	name string
	fn   func(*testing.T, task.Store)
} {
	if c.transact == nil {
		return nil
	}
	return []struct {
		name string
		fn   func(*testing.T, task.Store)
	}{{"TransactCreate", func(t *testing.T, s task.Store) { testTransactCreate(t, s, c.transact) }}}
}

// testTransactCreate: a task written in a transaction that does not commit leaves nothing; one
// that commits leaves the whole task, payload included (over any inline size), due for the
// consumer's sweep and counted; a replay of its id is refused and changes nothing.
func testTransactCreate(t *testing.T, s task.Store, create TxCreate) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	withPayload := func(id, fill string) task.Task {
		tk := plain(l, id, now)
		tk.Payload, tk.Spec = []byte(`{"s":"`+strings.Repeat(fill, 500)+`"}`), "spec-"+id
		return tk
	}

	if err := create(t, s, withPayload("rolled-back", "r"), false); err != nil {
		t.Fatalf("rolled back: %v", err)
	}
	if _, err := s.Get(ctx, l, "rolled-back"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get of the rolled back task: %v, want task.ErrNotFound", err)
	}

	tk := withPayload("committed", "c")
	if err := create(t, s, tk, true); err != nil {
		t.Fatalf("committed: %v", err)
	}
	check := func(when string) {
		t.Helper()
		got, err := s.Get(ctx, l, tk.ID)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if d := diff(tk, got); len(d) > 0 {
			t.Errorf("%s: the task read back differs: %v", when, d)
		}
		due, err := s.Due(ctx, task.DueParams{Lambda: l, Before: now.Add(time.Second)})
		if err != nil || !slices.ContainsFunc(due, func(d task.Task) bool { return d.ID == tk.ID }) {
			t.Errorf("%s: Due has %d tasks (err %v), want the task, for the consumer's sweep", when, len(due), err)
		}
		counts, err := s.Counts(ctx, l)
		if want := map[task.Status]int{task.StatusNew: 1}; err != nil || !maps.Equal(counts, want) {
			t.Errorf("%s: Counts %v (err %v), want %v", when, counts, err, want)
		}
	}
	check("committed")

	if err := create(t, s, withPayload("committed", "x"), true); !errors.Is(err, task.ErrExists) {
		t.Errorf("replayed id: %v, want task.ErrExists", err)
	}
	check("after the replay")
}
