package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// heldStore holds back every Update by the limit limit.
type heldStore struct {
	task.Store
	limit string
}

func (s heldStore) Update(context.Context, task.Task, int64) error {
	return &task.Held{Limit: s.limit}
}

// TestLimits: the lambdas' limits, as the registry writes them, with the claims held back today
// by each limit, counted from the store's writes through the metrics wrapper; a lambda or limit
// it does not know is not counted, and the next UTC day starts at zero.
func TestLimits(t *testing.T) {
	now := time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC)
	keyed := task.Lambda{Name: "keyed", Limits: task.Limits{KeyConcurrency: 1, Rate: task.StartRate{Count: 5, Per: time.Second}}}
	l := NewLimits([]task.Lambda{keyed, {Name: "echo"}}, func() time.Time { return now })
	for range 3 {
		err := metrics.Wrap(heldStore{limit: "key_concurrency"}, l).Update(t.Context(), task.Task{Lambda: "keyed"}, 1)
		if !errors.Is(err, task.ErrHeld) {
			t.Fatalf("Update: %v, want it held", err)
		}
	}
	l.Held("keyed", "rate")
	l.Held("keyed", "unknown")
	l.Held("other", "rate")

	rec := httptest.NewRecorder()
	l.ServeHTTP(rec, httptest.NewRequest("GET", LimitsPath, nil))
	var got LimitsJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Day != "2026-11-25" || len(got.Lambdas) != 2 || got.Lambdas[0].Lambda != "echo" || got.Lambdas[1].Lambda != "keyed" {
		t.Fatalf("got %+v, want the day and both lambdas, by name", got)
	}
	echo, k := got.Lambdas[0], got.Lambdas[1]
	if echo.Limits != (task.LimitsSpec{}) || len(echo.Held) != 0 {
		t.Errorf("echo: %+v, want no limits and nothing held", echo)
	}
	if want := (task.LimitsSpec{KeyConcurrency: 1, Rate: "5/s"}); k.Limits != want {
		t.Errorf("keyed's limits: %+v, want %+v", k.Limits, want)
	}
	if want := map[string]int{"key_concurrency": 3, "rate": 1}; !maps.Equal(k.Held, want) {
		t.Errorf("keyed's held: %v, want %v", k.Held, want)
	}

	now = now.Add(time.Minute) // midnight, UTC
	if day := l.Snapshot(); day.Day != "2026-11-26" || len(day.Lambdas[1].Held) != 0 {
		t.Errorf("the next day: %+v, want it to start at zero", day)
	}
}
