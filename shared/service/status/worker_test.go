package status_test

import (
	"reflect"
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

// TestClaimNamesLogLocation: a claim records where its worker's logs are (status.WithLogLocation),
// alone or batched by a Claimer, and the attempt its result ends keeps it, with the log the
// result carries (Result.Log), cut to its last task.MaxLogBytes. A location's fields are cut to
// task.MaxLogName; one without a group is none.
func TestClaimNamesLogLocation(t *testing.T) {
	logs := &task.LogLocation{Group: "/aws/lambda/worker-l", Stream: "2026/11/28/[$LATEST]abc", RequestID: "req-1"}
	long := strings.Repeat("x", task.MaxLogBytes) + "the last line\n"
	for _, batched := range []bool{false, true} {
		store, hsc := enqueuedTask(t)
		claim := hsc.Claim
		if batched {
			k := status.NewClaimer(hsc)
			defer k.Close()
			claim = k.Claim
		}
		claimed, err := claim(status.WithLogLocation(t.Context(), logs), "l", "d1", "receipt-1", "token-1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, status.Result{Outcome: status.Success, Log: long}); err != nil {
			t.Fatal(err)
		}
		h, err := store.Attempts(t.Context(), "l", "d1")
		if err != nil || len(h.Attempts) != 1 || !reflect.DeepEqual(h.Attempts[0].LogLocation, logs) || h.Attempts[0].Log != task.TailLog(long) ||
			len(h.Attempts[0].Log) != task.MaxLogBytes {
			t.Fatalf("batched %v: history %+v, %v; want one attempt with its logs at %+v and its log's last %d bytes", batched, h, err, logs, task.MaxLogBytes)
		}
	}
	cut := status.LogLocationOf(status.WithLogLocation(t.Context(), &task.LogLocation{Group: strings.Repeat("g", 600), Stream: "s"}))
	if cut == nil || len(cut.Group) != task.MaxLogName || cut.Stream != "s" {
		t.Errorf("a long group: %+v, want it cut to %d bytes", cut, task.MaxLogName)
	}
	if got := status.LogLocationOf(status.WithLogLocation(t.Context(), &task.LogLocation{Stream: "s"})); got != nil {
		t.Errorf("a location without a group: %+v, want none", got)
	}
	if got := status.LogLocationOf(t.Context()); got != nil {
		t.Errorf("no location: %+v, want none", got)
	}
}
