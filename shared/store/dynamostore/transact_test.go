package dynamostore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

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
