package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/eventschema"
)

// wantTypes are the detail-types of a task that succeeds at once and one that fails fatally.
var (
	succeeds = []string{"task.scheduled", "task.started", "task.succeeded"}
	fails    = []string{"task.scheduled", "task.started", "task.failed"}
)

// checkEvents validates each event against its schema and returns the detail-types of each
// task's events, by task id, in version order.
func checkEvents(t *testing.T, events []string) map[string][]string {
	t.Helper()
	dir, err := eventschema.Dir()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := eventschema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		dt      string
		version int64
	}
	byTask := map[string][]ev{}
	for _, line := range events {
		if _, err := schemas.Validate([]byte(line)); err != nil {
			t.Errorf("%s\n%v", line, err)
		}
		var e struct {
			DetailType string `json:"detail-type"`
			Detail     struct {
				TaskID  string `json:"task_id"`
				Version int64  `json:"version"`
			} `json:"detail"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		byTask[e.Detail.TaskID] = append(byTask[e.Detail.TaskID], ev{e.DetailType, e.Detail.Version})
	}
	out := map[string][]string{}
	for id, evs := range byTask {
		for v := int64(0); v < 100; v++ { // in version order
			for _, e := range evs {
				if e.version == v {
					out[id] = append(out[id], e.dt)
				}
			}
		}
	}
	return out
}

func sameTypes(got, want []string) bool { return strings.Join(got, " ") == strings.Join(want, " ") }

// TestDevEventsStdout: atf dev --events stdout writes each task's lifecycle events to stdout,
// one JSON line each, valid against its schema.
func TestDevEventsStdout(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t), "--events", "stdout")
	ok := schedule(t, dev.client, "echo", client.ScheduleRequest{Payload: json.RawMessage(`{}`)})
	bad := schedule(t, dev.client, "fail", client.ScheduleRequest{})
	waitTerminal(t, dev.client, "echo", ok.ID)
	waitTerminal(t, dev.client, "fail", bad.ID)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := checkEvents(t, strings.Split(strings.TrimSpace(dev.stdout.String()), "\n"))
		if sameTypes(got[ok.ID], succeeds) && sameTypes(got[bad.ID], fails) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %v, want %s: %v and %s: %v", got, ok.ID, succeeds, bad.ID, fails)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevEventsBridge: atf dev --events eventbridge puts them on the bus, whose rule sends them
// to a queue (on the emulators).
func TestDevEventsBridge(t *testing.T) {
	bus := awstest.NewEventBus(t, awstest.Name("atf-e2e"), `{"source":["atf"]}`)
	dev := startDev(t, handlersDir(t), embedded(t), "--events", "eventbridge", "--event-bus", bus.Name)
	ok := schedule(t, dev.client, "echo", client.ScheduleRequest{Payload: json.RawMessage(`{}`)})
	waitTerminal(t, dev.client, "echo", ok.ID)
	var lines []string
	for _, m := range bus.Receive(t, 30*time.Second, func(got []json.RawMessage) bool { return len(got) >= len(succeeds) }) {
		lines = append(lines, string(m))
	}
	if got := checkEvents(t, lines); !sameTypes(got[ok.ID], succeeds) {
		t.Fatalf("events %v, want %s: %v", got, ok.ID, succeeds)
	}
}
