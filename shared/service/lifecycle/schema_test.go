package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// schemaDir holds the JSON Schema of each event type, as a rule's target receives the event.
const schemaDir = "../../../events/schemas"

var update = flag.Bool("update", false, "rewrite events/schemas from the event types")

// schemaRule is what one event type's schema says beyond what every event has.
type schemaRule struct {
	status   []task.Status // the statuses the task may be in after the write
	previous []task.Status // before it; nil: no previous_status (scheduled)
	required []string      // detail fields present on this type besides the common ones
	allowed  []string      // detail fields that may be present besides the common and required
	doc      string
}

var runningStatuses = []task.Status{task.StatusProcessing, task.StatusClaimed}

// notEnded are the statuses a task may be cancelled from: waiting ones, and running ones for a
// version that cancels running tasks.
var notEnded = []task.Status{task.StatusPending, task.StatusNew, task.StatusEnqueued, task.StatusClaimed, task.StatusProcessing, task.StatusRetriableFailure}

var schemaRules = map[lifecycle.Type]schemaRule{
	lifecycle.Scheduled: {status: []task.Status{task.StatusPending, task.StatusNew, task.StatusEnqueued},
		required: []string{"run_at"}, allowed: []string{"deadline"},
		doc: "A task was created: pending (it waits for upstreams), new, or enqueued at once (due within 15 minutes). run_at is when it is due."},
	lifecycle.Started: {status: runningStatuses, previous: []task.Status{task.StatusEnqueued},
		doc: "A worker claimed the task: an attempt began (attempt counts it)."},
	lifecycle.Succeeded: {status: []task.Status{task.StatusSuccess}, previous: runningStatuses,
		doc: "The task ended success. Its result is read from the API (GET .../tasks/{id}), not carried here."},
	lifecycle.Retried: {status: []task.Status{task.StatusRetriableFailure}, previous: runningStatuses,
		required: []string{"run_at"}, allowed: []string{"error"},
		doc: "An attempt failed retriably, or its worker went silent (a heartbeat timeout); another attempt runs at run_at."},
	lifecycle.Failed: {status: []task.Status{task.StatusFatalFailure}, previous: runningStatuses,
		allowed: []string{"error"},
		doc:     "The task ended fatal_failure: its handler failed it fatally, or its result was refused."},
	lifecycle.Dead: {status: []task.Status{task.StatusDead}, previous: []task.Status{task.StatusProcessing, task.StatusClaimed, task.StatusNew, task.StatusEnqueued, task.StatusRetriableFailure},
		allowed: []string{"error"},
		doc:     "The task ended dead: its attempts are used up, or its deadline passed."},
	lifecycle.Cancelled: {status: []task.Status{task.StatusCancelled}, previous: notEnded,
		doc: "The task was cancelled."},
	lifecycle.Dropped: {status: []task.Status{task.StatusDropped}, previous: []task.Status{task.StatusPending, task.StatusNew, task.StatusEnqueued, task.StatusRetriableFailure},
		required: []string{"error"},
		doc:      "A gate set to drop ended the waiting task."},
	lifecycle.Unblocked: {status: []task.Status{task.StatusNew}, previous: []task.Status{task.StatusPending},
		required: []string{"run_at"},
		doc:      "Every upstream of the task ended as its trigger rule wants: it is new, due at run_at."},
	lifecycle.UpstreamFailed: {status: []task.Status{task.StatusUpstreamFailed}, previous: []task.Status{task.StatusPending},
		required: []string{"error"},
		doc:      "An upstream of the task did not end as its trigger rule wants (or its upstreams form a cycle): it ended upstream_failed; error names the upstream."},
}

type obj = map[string]any

func enum(ss []task.Status) obj {
	if len(ss) == 1 {
		return obj{"const": ss[0]}
	}
	return obj{"enum": ss}
}

// schemaOf returns the JSON Schema of events of type typ.
func schemaOf(typ lifecycle.Type) obj {
	r := schemaRules[typ]
	timeProp := obj{"type": "string", "format": "date-time"}
	props := obj{
		"event_id":     obj{"type": "string", "minLength": 1, "description": "lambda/task_id/version: unique to one write of the task; an event seen twice has the same event_id"},
		"type":         obj{"const": typ},
		"lambda":       obj{"type": "string", "minLength": 1},
		"task_id":      obj{"type": "string", "minLength": 1},
		"collection":   obj{"type": "string"},
		"priority":     obj{"type": "string", "minLength": 1},
		"status":       enum(r.status),
		"attempt":      obj{"type": "integer", "minimum": 0, "description": "attempts started so far, this one included"},
		"max_attempts": obj{"type": "integer", "minimum": 1},
		"version":      obj{"type": "integer", "minimum": 1, "description": "the task's version after the write"},
		"time":         obj{"type": "string", "format": "date-time", "description": "when the write happened"},
	}
	required := []string{"event_id", "type", "lambda", "task_id", "collection", "priority", "status", "attempt", "max_attempts", "version", "time"}
	if r.previous != nil {
		props["previous_status"] = enum(r.previous)
		required = append(required, "previous_status")
	}
	for _, f := range append(slices.Clone(r.required), r.allowed...) {
		switch f {
		case "run_at", "deadline":
			props[f] = timeProp
		case "error":
			props[f] = obj{"type": "string", "minLength": 1, "maxLength": task.MaxErrorBytes}
		}
	}
	required = append(required, r.required...)
	return obj{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/openatf/atf/events/schemas/" + typ.DetailType() + ".json",
		"title":       "atf " + typ.DetailType(),
		"description": r.doc + " The event as a rule's target receives it from the bus; detail is what atf puts.",
		"type":        "object",
		"required":    []string{"source", "detail-type", "detail"},
		"properties": obj{
			"version":     obj{"type": "string"},
			"id":          obj{"type": "string"},
			"account":     obj{"type": "string"},
			"region":      obj{"type": "string"},
			"time":        timeProp,
			"resources":   obj{"type": "array", "items": obj{"type": "string"}},
			"source":      obj{"const": lifecycle.Source},
			"detail-type": obj{"const": typ.DetailType()},
			"detail": obj{
				"type":                 "object",
				"required":             required,
				"properties":           props,
				"additionalProperties": false,
			},
		},
	}
}

// TestSchemas: events/schemas holds one schema per event type, as the types define them (run with
// -update to rewrite them), and nothing else.
func TestSchemas(t *testing.T) {
	want := map[string]bool{}
	for _, typ := range lifecycle.Types {
		if _, ok := schemaRules[typ]; !ok {
			t.Fatalf("event type %s has no schema rule", typ)
		}
		name := typ.DetailType() + ".json"
		want[name] = true
		b, err := json.MarshalIndent(schemaOf(typ), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, '\n')
		path := filepath.Join(schemaDir, name)
		if *update {
			if err := os.MkdirAll(schemaDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s is not what the event types define (%v): run go test ./shared/service/lifecycle -run TestSchemas -update", path, err)
		}
	}
	files, err := os.ReadDir(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".json") && !want[f.Name()] {
			t.Errorf("%s/%s is the schema of no event type", schemaDir, f.Name())
		}
	}
}
