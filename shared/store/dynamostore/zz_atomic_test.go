package dynamostore_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

func TestZZAtomic(t *testing.T) {
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	ctx := t.Context()
	now := time.Now().UTC()
	if err := s.Create(ctx, task.Task{Lambda: "a", ID: "x", Payload: []byte(`{}`), Status: task.StatusNew, Priority: "normal", CreatedAt: now, UpdatedAt: now, Version: 1}); err != nil {
		t.Fatal(err)
	}
	doubles := 0
	for round := 0; round < 50; round++ {
		cur, err := s.Get(ctx, "a", "x")
		if err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				next := cur
				next.Version++
				next.Error = string(rune('a' + w))
				if err := s.Update(ctx, next, cur.Version); err == nil {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			doubles++
			t.Logf("round %d: %d writers won from version %d", round, wins.Load(), cur.Version)
		}
	}
	if doubles > 0 {
		t.Fatalf("%d rounds with more than one winner", doubles)
	}
}
