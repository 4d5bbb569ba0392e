package status_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// sentFirst returns the task d1 of lambda l as the schedule path creates it after sending its
// message first, with that message's nonce.
func sentFirst(t *testing.T, now time.Time) task.Task {
	t.Helper()
	cfg := task.Config{}.WithDefaults()
	tk, err := task.New(task.Spec{ID: "d1"}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ahead, m, err := task.EnqueueAhead(tk, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ahead, _ = task.SendFirst(ahead, m)
	return ahead
}

// TestClaimBuriesMessageWithoutTask: the claim of a message sent before its task was written that
// finds no task answers not found (the worker drops the message) and buries its nonce, so that
// the create, landing later, fails and writes nothing: no task is left with its message dropped.
// A claim without a nonce buries nothing. The batched claims of atf dev do the same.
func TestClaimBuriesMessageWithoutTask(t *testing.T) {
	for _, batched := range []bool{false, true} {
		store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		now := time.Now().UTC()
		hsc := status.New(store, status.Config{})
		claim := hsc.Claim
		if batched {
			k := status.NewClaimer(hsc)
			defer k.Close()
			claim = k.Claim
		}
		tk := sentFirst(t, now)
		if _, err := claim(t.Context(), "l", "d1", "receipt", "token"); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("batched %v: claim without a nonce: %v, want ErrNotFound", batched, err)
		}
		if _, err := claim(status.WithNonce(t.Context(), tk.Nonce), "l", "d1", "receipt", "token"); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("batched %v: claim of a message that came first: %v, want ErrNotFound", batched, err)
		}
		if err := store.Create(t.Context(), tk); !errors.Is(err, task.ErrBuried) {
			t.Fatalf("batched %v: the create after its message was dropped: %v, want ErrBuried", batched, err)
		}
		if _, err := store.Get(t.Context(), "l", "d1"); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("batched %v: %v, want no task", batched, err)
		}
	}
}

// landingStore is a store whose task lands between the claim's read and its Bury, as a create
// that was slow would.
type landingStore struct {
	task.Store
	tk task.Task
}

func (s landingStore) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	if err := s.Create(ctx, s.tk); err != nil {
		return err
	}
	return s.Store.Bury(ctx, lambda, id, nonce, until)
}

// TestClaimFindsTaskThatLandsMeanwhile: a claim that finds no task, but whose Bury finds the task
// landed meanwhile, claims it.
func TestClaimFindsTaskThatLandsMeanwhile(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tk := sentFirst(t, time.Now().UTC())
	hsc := status.New(landingStore{store, tk}, status.Config{})
	claimed, err := hsc.Claim(status.WithNonce(t.Context(), tk.Nonce), "l", "d1", "receipt", "token")
	if err != nil || claimed.Status != task.StatusProcessing {
		t.Fatalf("claim: %s, %v; want the task that landed, processing", claimed.Status, err)
	}
}

// slowCreate is a store whose task is not there for the first reads, as a create that lands
// a moment after its message arrives; it counts the tombstones written.
type slowCreate struct {
	task.Store
	mu     sync.Mutex
	hidden int
	buried int
}

func (s *slowCreate) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	s.mu.Lock()
	hide := s.hidden > 0
	s.hidden--
	s.mu.Unlock()
	if hide {
		return task.Task{}, task.Errorf(task.ErrNotFound, "not yet")
	}
	return s.Store.Get(ctx, lambda, id)
}

func (s *slowCreate) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	s.mu.Lock()
	s.buried++
	s.mu.Unlock()
	return s.Store.Bury(ctx, lambda, id, nonce, until)
}

// TestClaimWaitsForCreate: a claim of a message sent first that finds no task reads again a few
// times before it buries the message: the message of a task due now usually comes while its
// create is landing, and a tombstone would fail the create (and its whole batch). Within
// EarlyWait it claims the task, and writes no tombstone.
func TestClaimWaitsForCreate(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tk := sentFirst(t, time.Now().UTC())
	if err := store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	slow := &slowCreate{Store: store, hidden: 3}
	hsc := status.New(slow, status.Config{})
	claimed, err := hsc.Claim(status.WithNonce(t.Context(), tk.Nonce), "l", "d1", "receipt", "token")
	if err != nil || claimed.Status != task.StatusProcessing || slow.buried != 0 {
		t.Fatalf("claim: %s, %v, %d tombstones; want the task claimed once it shows, and none", claimed.Status, err, slow.buried)
	}
}

// TestClaimWithoutNonceWaitsForCreate: a claim without a nonce (a worker that predates them) that
// finds no task reads again as one with a nonce does, and claims the task whose create lands
// meanwhile, instead of dropping its only message; it buries nothing.
func TestClaimWithoutNonceWaitsForCreate(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tk := sentFirst(t, time.Now().UTC())
	if err := store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	slow := &slowCreate{Store: store, hidden: 2}
	claimed, err := status.New(slow, status.Config{}).Claim(t.Context(), "l", "d1", "receipt", "token")
	if err != nil || claimed.Status != task.StatusProcessing || slow.buried != 0 {
		t.Fatalf("claim: %s, %v, %d tombstones; want the task claimed once it shows, and none", claimed.Status, err, slow.buried)
	}
}

// gateWhileWaiting is a slowCreate that pauses the lambda at the first read that finds no task,
// as a gate set while a claim waits for its task's create.
type gateWhileWaiting struct {
	*slowCreate
	gates *task.GateSnapshot
	set   bool
}

func (g *gateWhileWaiting) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	if !g.set {
		g.set = true
		if err := g.SetGate(ctx, task.Gate{Lambda: lambda, Mode: task.GatePause, UpdatedAt: time.Now().UTC()}); err != nil {
			return task.Task{}, err
		}
		g.gates.Invalidate()
	}
	return g.slowCreate.Get(ctx, lambda, id)
}

// TestClaimEarlyReadsGatesAgain: a claim that waits for its task's create reads the gates again
// before each read of the task, so that a gate set meanwhile holds the task (status.GateAge).
func TestClaimEarlyReadsGatesAgain(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tk := sentFirst(t, time.Now().UTC())
	if err := store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	gates := &task.GateSnapshot{Store: store, Age: status.GateAge}
	s := &gateWhileWaiting{slowCreate: &slowCreate{Store: store, hidden: 1}, gates: gates}
	_, err = status.New(s, status.Config{Gates: gates}).Claim(status.WithNonce(t.Context(), tk.Nonce), "l", "d1", "receipt", "token")
	if got, _ := store.Get(t.Context(), "l", "d1"); !errors.Is(err, task.ErrConflict) || got.Status != task.StatusNew {
		t.Fatalf("claim under a gate set while it waited: %v, task %s; want ErrConflict and the task held, new", err, got.Status)
	}
}
