package storetest

import (
	"slices"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// testKey checks that a task's key (task.Task.Key) is stored by Create and read back by every
// read, and that transitions keep it.
func testKey(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	keyed := plain(l, "keyed", now)
	keyed.Key = "tenant-1.eu:42"
	bare := plain(l, "bare", now)
	create(t, s, keyed, bare)
	mustEqual(t, s, keyed)
	mustEqual(t, s, bare)

	if r, ok := s.(task.StateReader); ok {
		got, err := r.GetState(ctx, l, keyed.ID)
		if err != nil || got.Key != keyed.Key {
			t.Errorf("GetState: key %q, %v; want %q", got.Key, err, keyed.Key)
		}
	}
	many, err := s.GetMany(ctx, []task.Ref{keyed.Ref(), bare.Ref()})
	if err != nil || len(many) != 2 || many[0].Key != keyed.Key || many[1].Key != "" {
		t.Errorf("GetMany: %v, %v; want keys %q and none", many, err, keyed.Key)
	}
	listed, _, err := s.List(ctx, task.ListParams{Lambda: l})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	i := slices.IndexFunc(listed, func(x task.Task) bool { return x.ID == keyed.ID })
	if i < 0 || listed[i].Key != keyed.Key {
		t.Errorf("List: %v; want %s with key %q", listed, keyed.ID, keyed.Key)
	}

	// A transition carries the key on: the task keeps it to the end.
	enqueued, err := task.Enqueue(keyed, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if err := s.Update(ctx, enqueued, keyed.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, enqueued)
}
