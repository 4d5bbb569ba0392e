package dynamostore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// TestCreateTransactItems commits the entries of a task with an inline payload and of one with a
// payload item: each reads back whole and waiting, is counted once Created, and a replay of its
// id cancels the app's transaction with task.ErrExists.
func TestCreateTransactItems(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "a"}.WithDefaults()
	now := time.Now().UTC()
	for _, c := range []struct {
		id      string
		payload string
		entries int
	}{
		{"inline", `{"n":1}`, 1},
		{"own-item", `{"s":"` + strings.Repeat("x", dynamostore.InlinePayload) + `"}`, 2},
	} {
		tk := newTask(t, l, c.id, []byte(c.payload), now)
		items, err := s.CreateTransactItems(tk)
		if err != nil || len(items) != c.entries {
			t.Fatalf("%s: %d entries (err %v), want %d", c.id, len(items), err, c.entries)
		}
		if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		s.Created(ctx, tk)
		got, err := s.Get(ctx, l.Name, c.id)
		if err != nil || got.Status != task.StatusNew || !bytes.Equal(got.Payload, tk.Payload) {
			t.Errorf("%s: read back %s with payload %q (err %v), want it new with its payload", c.id, got.Status, got.Payload, err)
		}
		replay, err := s.CreateTransactItems(newTask(t, l, c.id, []byte(c.payload), now))
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: replay})
		if err := dynamostore.CreateRefused(err, tk, 0); !errors.Is(err, task.ErrExists) {
			t.Errorf("%s: replay says %v, want task.ErrExists", c.id, err)
		}
	}
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Before: now.Add(time.Second), Limit: 10})
	if err != nil || len(due) != 2 {
		t.Errorf("due: %d tasks (err %v), want both, for the consumer's sweep", len(due), err)
	}
	counts, err := s.Counts(ctx, l.Name)
	if err != nil || counts[task.StatusNew] != 2 {
		t.Errorf("counts %v (err %v), want 2 new", counts, err)
	}
}

// TestCreateTransactItemsRefuses refuses what one transaction cannot create: a task with
// upstreams, and an invalid key.
func TestCreateTransactItemsRefuses(t *testing.T) {
	s := newStore(t, nil, dynamostore.Config{Table: "atf-t"})
	l := task.Lambda{Name: "a"}.WithDefaults()
	withAfter, err := task.New(task.Spec{ID: "b", After: []task.Ref{{ID: "up"}}}, l, time.Now(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []task.Task{withAfter, {Lambda: "a", ID: "no spaces"}} {
		if _, err := s.CreateTransactItems(tk); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("task %q: %v, want task.ErrInvalid", tk.ID, err)
		}
	}
}
