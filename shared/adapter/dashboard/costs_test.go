package dashboard

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// TestCosts: a lambda's day adds up the units of its transitions at the list prices, a lambda
// it does not know is not counted, and the next UTC day starts at zero.
func TestCosts(t *testing.T) {
	now := time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC)
	c := NewCosts([]string{"echo", "sleep"}, func() time.Time { return now })
	c.Transitions("echo", "", task.StatusEnqueued, lifecycle.Scheduled, 10) // a batch of 10
	for range 10 {
		c.Transitions("echo", task.StatusEnqueued, task.StatusProcessing, lifecycle.Started, 1)
		c.Transitions("echo", task.StatusProcessing, task.StatusSuccess, lifecycle.Succeeded, 1)
	}
	c.Transitions("unknown", "", task.StatusEnqueued, lifecycle.Scheduled, 5)

	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", CostsPath, nil))
	var got CostsJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Day != "2026-11-25" || got.PricesChecked != cost.PricesChecked || len(got.Lambdas) != 2 {
		t.Fatalf("got %+v, want the day, the prices' date and both lambdas", got)
	}
	echo, sleep := got.Lambdas[0], got.Lambdas[1]
	// 10 lives of the model's units (11 WRU and 2 RRU today: docs/capacity.md).
	life := cost.TransitionUnits("", task.StatusEnqueued).Plus(cost.TransitionUnits(task.StatusEnqueued, task.StatusProcessing)).
		Plus(cost.TransitionUnits(task.StatusProcessing, task.StatusSuccess)).Times(10)
	wantUSD := (life.Write*cost.DynamoDBWritePerMillion + life.Read*cost.DynamoDBReadPerMillion) / 1e6
	if echo.Lambda != "echo" || echo.Transitions != 30 || echo.WriteUnits != life.Write || echo.ReadUnits != life.Read || math.Abs(echo.USD-wantUSD) > 1e-15 {
		t.Errorf("echo: %+v, want 30 transitions, %v WRU, %v RRU, $%v", echo, life.Write, life.Read, wantUSD)
	}
	if sleep.Lambda != "sleep" || sleep.Transitions != 0 || sleep.USD != 0 {
		t.Errorf("sleep: %+v, want nothing", sleep)
	}

	now = now.Add(time.Minute) // midnight, UTC
	if day := c.Snapshot(); day.Day != "2026-11-26" || day.Lambdas[0].Transitions != 0 || day.Lambdas[0].USD != 0 {
		t.Errorf("the next day: %+v, want it to start at zero", day)
	}
}
