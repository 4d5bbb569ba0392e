package httpapi_test

import (
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestTaskAnswersOnContract: a task sent ahead to its queue (enqueued before its run time) and a
// task held by a paused gate answer as the contract says, and the held one names its gate.
func TestTaskAnswersOnContract(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}, Queue: memqueue.New()})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"soon","delay":"10s"}`); status != 201 || out["status"] != "enqueued" || out["not_before"] == nil {
		t.Fatalf("schedule with a delay of 10s: %d %v, want it enqueued, not before its run time", status, out)
	}
	if status, out := call(t, srv, "PUT", "/v1/lambdas/echo/gate", `{"mode":"pause"}`); status != 200 {
		t.Fatalf("gate: %d %v", status, out)
	}
	status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/soon", "")
	if g, _ := out["held_by"].(map[string]any); status != 200 || g["lambda"] != "echo" || g["mode"] != "pause" {
		t.Fatalf("a task behind a paused gate: %d %v, want it held_by the gate", status, out)
	}
}

// TestRateSlotShown: a task that its lambda's rate holds back answers with the start booked for
// it (rate_slot), as the contract says.
func TestRateSlotShown(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rated := task.Lambda{Name: "rated", Limits: task.Limits{Rate: task.StartRate{Count: 1, Per: time.Second}}}.WithDefaults()
	lambdas := task.FixedCatalog{rated}
	svc := frontend.New(store, frontend.Config{Lambdas: lambdas, Queue: memqueue.New()})
	claims := status.New(store, status.Config{Lambdas: lambdas})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	for _, id := range []string{"first", "second"} {
		if status, out := call(t, srv, "POST", "/v1/lambdas/rated/tasks", `{"id":"`+id+`"}`); status != 201 {
			t.Fatalf("schedule %s: %d %v", id, status, out)
		}
	}
	if _, err := claims.Claim(t.Context(), "rated", "first", "", ""); err != nil {
		t.Fatalf("the first start under the rate: %v", err)
	}
	if _, err := claims.Claim(t.Context(), "rated", "second", "", ""); !errors.Is(err, task.ErrHeld) {
		t.Fatalf("the second start within the rate's interval: %v; want it held, and booked", err)
	}
	status, out := call(t, srv, "GET", "/v1/lambdas/rated/tasks/second", "")
	if status != 200 || out["status"] != "enqueued" || out["rate_slot"] == nil {
		t.Fatalf("a task a rate holds: %d %v; want it enqueued with its rate_slot", status, out)
	}
}
