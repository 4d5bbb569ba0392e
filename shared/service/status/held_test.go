package status_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// heldStore holds back every write that carries limits, as a store whose limit is full would:
// it writes nothing and says until when. It has no UpdateMany, so a batch writes through Update.
type heldStore struct {
	task.Store
	until time.Time
}

func (s heldStore) Update(ctx context.Context, t task.Task, prev int64) error {
	if !t.Limits.IsZero() {
		return &task.Held{Limit: "key_concurrency", Until: s.until}
	}
	return s.Store.Update(ctx, t, prev)
}

// TestClaimCarriesLimits: a claim's start carries its lambda's limits to the store's write,
// whether made alone (Controller.Claim) or in a batch (Claimer, as atf dev claims), and a claim
// the store holds back answers the *task.Held as it is, leaving the task enqueued, untried.
func TestClaimCarriesLimits(t *testing.T) {
	inner, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: "l", Limits: task.Limits{KeyConcurrency: 1}}.WithDefaults()
	now := time.Now().UTC()
	until := now.Add(time.Minute).Truncate(time.Millisecond)
	hsc := status.New(heldStore{inner, until}, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler), Lambdas: task.FixedCatalog([]task.Lambda{l})})
	k := status.NewClaimer(hsc)
	defer k.Close()
	for _, c := range []struct {
		name  string
		claim func(ctx context.Context, lambda, id, delivery, token string) (task.Task, error)
	}{{"alone", hsc.Claim}, {"batched", k.Claim}} {
		t.Run(c.name, func(t *testing.T) {
			tk, err := task.New(task.Spec{ID: c.name, Key: "k"}, l, now, cfg)
			if err != nil {
				t.Fatal(err)
			}
			enq, _ := task.Enqueue(tk, now, cfg)
			if err := inner.Create(t.Context(), enq); err != nil {
				t.Fatal(err)
			}
			_, err = c.claim(t.Context(), "l", c.name, "receipt", "token")
			var held *task.Held
			if !errors.As(err, &held) || held.Limit != "key_concurrency" || !held.Until.Equal(until) {
				t.Fatalf("claim: %v, want held by key_concurrency until %s", err, until)
			}
			if got, err := inner.Get(t.Context(), "l", c.name); err != nil || got.Status != task.StatusEnqueued || got.Attempts != 0 {
				t.Fatalf("task %s after %d attempts (%v), want enqueued, untried", got.Status, got.Attempts, err)
			}
		})
	}
}
