package status_test

import (
	"strings"
	"testing"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// TestClaimNamesWorker: a claim records the worker its context names (status.WithWorker), alone
// or batched by a Claimer, and the attempt's history names it once the run ends; a name over
// MaxWorkerName is cut to it.
func TestClaimNamesWorker(t *testing.T) {
	for _, batched := range []bool{false, true} {
		store, hsc := enqueuedTask(t)
		claim := hsc.Claim
		if batched {
			k := status.NewClaimer(hsc)
			defer k.Close()
			claim = k.Claim
		}
		ctx := status.WithWorker(t.Context(), "host-1:42")
		claimed, err := claim(ctx, "l", "d1", "receipt-1", "token-1")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := store.Get(t.Context(), "l", "d1"); err != nil || got.Worker != "host-1:42" || got.StartedAt == nil {
			t.Fatalf("batched %v: stored worker %q, started %v, %v; want host-1:42 and the claim's time", batched, got.Worker, got.StartedAt, err)
		}
		if _, err := hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, status.Result{Outcome: status.Retriable, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		h, err := store.Attempts(t.Context(), "l", "d1")
		if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Worker != "host-1:42" || h.Attempts[0].Outcome != task.OutcomeRetriable || h.Attempts[0].Error != "boom" {
			t.Fatalf("batched %v: history %+v, %v; want one retriable attempt by host-1:42", batched, h, err)
		}
	}
	if got := status.WorkerOf(status.WithWorker(t.Context(), strings.Repeat("é", status.MaxWorkerName))); len(got) > status.MaxWorkerName || !strings.HasPrefix(got, "éé") {
		t.Errorf("a long name: %d bytes, want at most %d", len(got), status.MaxWorkerName)
	}
}
