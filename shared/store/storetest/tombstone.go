package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testBury: a message sent before its task was written that found no task buries its nonce
// (Bury). A create carrying that nonce then fails with ErrBuried and writes nothing, alone or in
// a batch, for every nonce buried there; one carrying another nonce, or none, is not hindered. No
// read returns a tombstone, no update writes over one, and a Bury of a task that exists fails
// with ErrExists.
func testBury(t *testing.T, s task.Store) {
	ctx, l, now := t.Context(), lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	until := now.Add(task.TombstoneLife)
	sentFirst := func(id string) task.Task {
		t.Helper()
		ahead, m, err := task.EnqueueAhead(plain(l, id, now), now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ahead, _ = task.SendFirst(ahead, m)
		return ahead
	}
	a, b := sentFirst("a"), sentFirst("b")
	if err := s.Bury(ctx, l, "a", a.Nonce, until); err != nil {
		t.Fatalf("Bury of a missing task: %v", err)
	}
	if err := s.Bury(ctx, l, "a", "another-message", until); err != nil {
		t.Fatalf("Bury of a second message: %v", err)
	}

	// A tombstone is no task.
	if _, err := s.Get(ctx, l, "a"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get of a tombstone: %v, want ErrNotFound", err)
	}
	if r, ok := s.(task.StateReader); ok {
		if _, err := r.GetState(ctx, l, "a"); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("GetState of a tombstone: %v, want ErrNotFound", err)
		}
	}
	if many, err := s.GetMany(ctx, []task.Ref{{Lambda: l, ID: "a"}}); err != nil || len(many) != 1 || many[0].ID != "" {
		t.Errorf("GetMany of a tombstone: %+v, %v; want a zero task", many, err)
	}
	if refs, err := s.Upstreams(ctx, task.Ref{Lambda: l, ID: "a"}, 0, 10); len(refs) > 0 || err != nil && !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Upstreams of a tombstone: %v, %v; want none, as of a missing task", refs, err)
	}
	if got, _, err := s.List(ctx, task.ListParams{Lambda: l}); err != nil || len(got) != 0 {
		t.Errorf("List with a tombstone only: %v, %v; want no task", ids(got), err)
	}
	if due, err := s.Due(ctx, task.DueParams{Lambda: l, Before: now.Add(time.Hour)}); err != nil || len(due) != 0 {
		t.Errorf("Due with a tombstone only: %v, %v; want no task", ids(due), err)
	}
	claimed, err := task.Claim(a, "lease", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, claimed, a.Version); !errors.Is(err, task.ErrConflict) {
		t.Errorf("Update over a tombstone: %v, want ErrConflict", err)
	}

	// The creates whose messages were dropped fail, and write nothing.
	if err := s.Create(ctx, a); !errors.Is(err, task.ErrBuried) {
		t.Errorf("Create with a buried nonce: %v, want ErrBuried", err)
	}
	second := a
	second.Nonce = "another-message"
	if err := s.CreateBatch(ctx, []task.Task{b, second}); !errors.Is(err, task.ErrBuried) {
		t.Errorf("CreateBatch with a buried nonce: %v, want ErrBuried", err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := s.Get(ctx, l, id); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("Get %s after the refused creates: %v, want ErrNotFound", id, err)
		}
	}

	// A create with a fresh message takes the id; a late create of a dropped one finds it taken.
	fresh := sentFirst("a")
	if err := s.CreateBatch(ctx, []task.Task{fresh, b}); err != nil {
		t.Fatalf("CreateBatch with fresh nonces over a tombstone: %v", err)
	}
	mustEqual(t, s, fresh)
	mustEqual(t, s, b)
	if err := s.Create(ctx, a); !errors.Is(err, task.ErrExists) {
		t.Errorf("a late Create with a buried nonce, once the task exists: %v, want ErrExists", err)
	}
	if err := s.Bury(ctx, l, "a", "late-message", until); !errors.Is(err, task.ErrExists) {
		t.Errorf("Bury of a task that exists: %v, want ErrExists", err)
	}
	if got, _, err := s.List(ctx, task.ListParams{Lambda: l}); err != nil || len(got) != 2 {
		t.Errorf("List: %v, %v; want a and b", ids(got), err)
	}

	// A task written first (no nonce) is not hindered by a tombstone.
	if err := s.Bury(ctx, l, "c", "a-message", until); err != nil {
		t.Fatal(err)
	}
	c := plain(l, "c", now)
	create(t, s, c)
	mustEqual(t, s, c)
}
