package local_test

// The acceptance test of lifecycle events (issue 14): every task of an end-to-end run yields its
// events on the emulated EventBridge's target queue (moto: a bus, a rule, an SQS target), each
// valid against its schema in events/schemas; on the embedded store and on DynamoDB and SQS.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/eventbus"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/testkit/eventschema"
	"github.com/openatf/atf/shared/worker"
)

// eventsHandler succeeds, or fails as the task's id says: fatal-*, always-* (retriably, every
// attempt), flaky-* (retriably, the first attempt).
var eventsHandler = worker.HandlerFunc(func(_ context.Context, t worker.Task) (json.RawMessage, error) {
	switch {
	case strings.HasPrefix(t.ID, "fatal"):
		return nil, worker.Fatal(errors.New("fails for good, as asked"))
	case strings.HasPrefix(t.ID, "always"), strings.HasPrefix(t.ID, "flaky") && t.Attempt == 1:
		return nil, fmt.Errorf("attempt %d fails, as asked", t.Attempt)
	}
	return json.RawMessage(`"ok"`), nil
})

func testEvents(t *testing.T, b backend) {
	bus := awstest.NewEventBus(t, awstest.Name("atf-e2e"), `{"source":["atf"]}`)
	sink, err := eventbus.New(bus.Events, bus.Name)
	if err != nil {
		t.Fatal(err)
	}
	mux := worker.NewMux()
	mux.Handle("ev", eventsHandler)
	c := chaostest.Start(t, local.Config{Mux: mux, Store: b.store, Queue: b.queue, Concurrency: 8, Task: chaostest.Timing(b.aws), MessageTimesLease: b.aws, Events: sink})
	ctx := t.Context()

	// What each task goes through, in its events' order (by version).
	want := map[string][]lifecycle.Type{
		"ok":        {lifecycle.Scheduled, lifecycle.Started, lifecycle.Succeeded},
		"flaky":     {lifecycle.Scheduled, lifecycle.Started, lifecycle.Retried, lifecycle.Started, lifecycle.Succeeded},
		"fatal":     {lifecycle.Scheduled, lifecycle.Started, lifecycle.Failed},
		"always":    {lifecycle.Scheduled, lifecycle.Started, lifecycle.Retried, lifecycle.Started, lifecycle.Dead},
		"later":     {lifecycle.Scheduled, lifecycle.Cancelled},
		"gated":     {lifecycle.Scheduled, lifecycle.Dropped},
		"fatal-up":  {lifecycle.Scheduled, lifecycle.Started, lifecycle.Failed},
		"down-bad":  {lifecycle.Scheduled, lifecycle.UpstreamFailed},
		"up":        {lifecycle.Scheduled, lifecycle.Started, lifecycle.Succeeded},
		"down-good": {lifecycle.Scheduled, lifecycle.Unblocked, lifecycle.Started, lifecycle.Succeeded},
	}
	for _, r := range []client.ScheduleRequest{{ID: "ok"}, {ID: "flaky"}, {ID: "fatal"}, {ID: "always", MaxAttempts: 2}, {ID: "later", Delay: "1h"}} {
		if _, _, err := c.Schedule(ctx, "ev", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Cancel(ctx, "ev", "later"); err != nil {
		t.Fatal(err)
	}
	// Due in a second, and its collection's gate set to drop before then.
	if _, _, err := c.Schedule(ctx, "ev", client.ScheduleRequest{ID: "gated", Collection: "gated", Delay: "1s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetGate(ctx, "ev", "gated", task.GateDrop); err != nil {
		t.Fatal(err)
	}
	g := &client.Graph{Lambda: "ev"}
	g.Add(client.ScheduleRequest{ID: "down-bad"}, g.Add(client.ScheduleRequest{ID: "fatal-up"}))
	g.Add(client.ScheduleRequest{ID: "down-good"}, g.Add(client.ScheduleRequest{ID: "up"}))
	if _, _, err := c.ScheduleGraph(ctx, g); err != nil {
		t.Fatal(err)
	}
	for id := range want {
		waitEnded(t, c, task.Ref{Lambda: "ev", ID: id}, flowTimeout(b, len(want)))
	}

	total := 0
	for _, w := range want {
		total += len(w)
	}
	dir, err := eventschema.Dir()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := eventschema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]lifecycle.Event{} // by event_id: a consumer drops a duplicate
	distinct := func(events []json.RawMessage) int {
		ids := map[string]bool{}
		for _, m := range events {
			var env struct {
				Detail struct {
					ID string `json:"event_id"`
				} `json:"detail"`
			}
			_ = json.Unmarshal(m, &env)
			ids[env.Detail.ID] = true
		}
		return len(ids)
	}
	got := bus.Receive(t, time.Minute, func(events []json.RawMessage) bool { return distinct(events) >= total })
	// And any event past those expected, which would be one too many.
	got = append(got, bus.Receive(t, 2*time.Second, func([]json.RawMessage) bool { return false })...)
	for _, m := range got {
		if _, err := schemas.Validate(m); err != nil {
			t.Errorf("%s\n%v", m, err)
		}
		var env struct {
			Detail lifecycle.Event `json:"detail"`
		}
		if err := json.Unmarshal(m, &env); err != nil {
			t.Fatal(err)
		}
		seen[env.Detail.ID] = env.Detail
	}
	byTask := map[string][]lifecycle.Event{}
	for _, e := range seen {
		if e.Lambda != "ev" {
			t.Errorf("event %s of lambda %s", e.ID, e.Lambda)
		}
		byTask[e.TaskID] = append(byTask[e.TaskID], e)
	}
	for id, w := range want {
		evs := byTask[id]
		slices.SortFunc(evs, func(a, b lifecycle.Event) int { return int(a.Version - b.Version) })
		var types []lifecycle.Type
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if !slices.Equal(types, w) {
			t.Errorf("task %s: events %v, want %v", id, types, w)
		}
	}
	if len(byTask) != len(want) {
		t.Errorf("events of %d tasks, want %d", len(byTask), len(want))
	}
}

func TestEvents(t *testing.T)    { testEvents(t, embedded(t)) }
func TestEventsAWS(t *testing.T) { testEvents(t, emulated(t, "ev")) }
