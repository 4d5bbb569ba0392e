package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/eventschema"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg = task.Config{}.WithDefaults()
)

// newTask returns a task as created, with max attempts maxAttempts.
func newTask(t *testing.T, id string, maxAttempts int) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id, MaxAttempts: maxAttempts}, task.Lambda{Name: "echo"}.WithDefaults(), t0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// must applies a transition that must be allowed.
func must(t *testing.T, tk task.Task, err error) task.Task {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// ok returns a function that fails t on a refused transition and returns its task otherwise.
func ok(t *testing.T) func(task.Task, error) task.Task {
	return func(tk task.Task, err error) task.Task { t.Helper(); return must(t, tk, err) }
}

func enqueued(t *testing.T, tk task.Task) task.Task {
	return ok(t)(task.Enqueue(tk, t0, cfg))
}

func running(t *testing.T, tk task.Task) task.Task {
	return ok(t)(task.Claim(enqueued(t, tk), "L", t0, cfg))
}

// TestWritten: every kind of transition maps to its event, or to none, from the task it writes.
func TestWritten(t *testing.T) {
	deadline := t0.Add(-time.Second)
	cases := []struct {
		name  string
		write func(t *testing.T) task.Task
		want  lifecycle.Type // empty: no event
	}{
		{"enqueue", func(t *testing.T) task.Task { return enqueued(t, newTask(t, "a", 3)) }, ""},
		{"enqueue ahead", func(t *testing.T) task.Task {
			tk, _, err := task.EnqueueAhead(newTask(t, "a", 3), t0, cfg)
			return must(t, tk, err)
		}, ""},
		{"enqueue again", func(t *testing.T) task.Task {
			return ok(t)(task.Enqueue(enqueued(t, newTask(t, "a", 3)), t0.Add(time.Hour), cfg))
		}, ""},
		{"enqueue past the deadline", func(t *testing.T) task.Task {
			tk := newTask(t, "a", 3)
			tk.Deadline = &deadline
			return ok(t)(task.Enqueue(tk, t0, cfg))
		}, lifecycle.Dead},
		{"unsent", func(t *testing.T) task.Task { return ok(t)(task.Unsent(enqueued(t, newTask(t, "a", 3)), t0, cfg)) }, ""},
		{"hold", func(t *testing.T) task.Task { return ok(t)(task.Hold(enqueued(t, newTask(t, "a", 3)), t0)) }, ""},
		{"claim", func(t *testing.T) task.Task { return running(t, newTask(t, "a", 3)) }, lifecycle.Started},
		{"heartbeat", func(t *testing.T) task.Task {
			return ok(t)(task.Heartbeat(running(t, newTask(t, "a", 3)), "L", t0, cfg))
		}, ""},
		{"heartbeat of a task an older version claimed", func(t *testing.T) task.Task {
			tk := running(t, newTask(t, "a", 3))
			tk.Status = task.StatusClaimed
			return ok(t)(task.Heartbeat(tk, "L", t0, cfg))
		}, ""},
		{"succeed", func(t *testing.T) task.Task {
			return ok(t)(task.Succeed(running(t, newTask(t, "a", 3)), "L", json.RawMessage(`{"ok":true}`), t0, cfg))
		}, lifecycle.Succeeded},
		{"succeed with a result over the limit", func(t *testing.T) task.Task {
			big := json.RawMessage(`"` + strings.Repeat("x", cfg.PayloadLimit) + `"`)
			return ok(t)(task.Succeed(running(t, newTask(t, "a", 3)), "L", big, t0, cfg))
		}, lifecycle.Failed},
		{"fail retriably", func(t *testing.T) task.Task {
			return ok(t)(task.Fail(running(t, newTask(t, "a", 3)), "L", "try again", true, t0, cfg, 0.5))
		}, lifecycle.Retried},
		{"fail retriably, the last attempt", func(t *testing.T) task.Task {
			return ok(t)(task.Fail(running(t, newTask(t, "a", 1)), "L", "try again", true, t0, cfg, 0.5))
		}, lifecycle.Dead},
		{"fail fatally", func(t *testing.T) task.Task {
			return ok(t)(task.Fail(running(t, newTask(t, "a", 3)), "L", "no", false, t0, cfg, 0.5))
		}, lifecycle.Failed},
		{"fail retriably, the retry sent ahead in the same write", func(t *testing.T) task.Task {
			failed := ok(t)(task.Fail(running(t, newTask(t, "a", 3)), "L", "try again", true, t0, cfg, 0.5))
			tk, _, err := task.EnqueueAhead(failed, t0, cfg)
			return must(t, tk, err)
		}, lifecycle.Retried},
		{"time out, the retry sent ahead in the same write", func(t *testing.T) task.Task {
			timedOut := ok(t)(task.Timeout(running(t, newTask(t, "a", 3)), t0.Add(time.Hour), cfg, 0.5))
			tk, _, err := task.EnqueueAhead(timedOut, t0.Add(time.Hour), cfg)
			return must(t, tk, err)
		}, lifecycle.Retried},
		{"time out", func(t *testing.T) task.Task {
			return ok(t)(task.Timeout(running(t, newTask(t, "a", 3)), t0.Add(time.Hour), cfg, 0.5))
		}, lifecycle.Retried},
		{"time out, the last attempt", func(t *testing.T) task.Task {
			return ok(t)(task.Timeout(running(t, newTask(t, "a", 1)), t0.Add(time.Hour), cfg, 0.5))
		}, lifecycle.Dead},
		{"release", func(t *testing.T) task.Task { return ok(t)(task.Release(running(t, newTask(t, "a", 3)), "L", t0)) }, ""},
		{"expire", func(t *testing.T) task.Task { return ok(t)(task.Expire(running(t, newTask(t, "a", 3)), t0)) }, ""},
		{"cancel", func(t *testing.T) task.Task { return ok(t)(task.Cancel(newTask(t, "a", 3), t0)) }, lifecycle.Cancelled},
		{"cancel a retrying task", func(t *testing.T) task.Task {
			tk := ok(t)(task.Fail(running(t, newTask(t, "a", 3)), "L", "x", true, t0, cfg, 0.5))
			return ok(t)(task.Cancel(tk, t0))
		}, lifecycle.Cancelled},
		{"drop", func(t *testing.T) task.Task { return ok(t)(task.Drop(enqueued(t, newTask(t, "a", 3)), t0)) }, lifecycle.Dropped},
		{"park", func(t *testing.T) task.Task { return ok(t)(task.Park(newTask(t, "a", 3), t0)) }, ""},
		{"unpark", func(t *testing.T) task.Task {
			return ok(t)(task.Unpark(ok(t)(task.Park(newTask(t, "a", 3), t0)), t0))
		}, ""},
		{"settle the last upstream", func(t *testing.T) task.Task {
			return ok(t)(task.Settle(pending(t, 1), []task.Settled{{Index: 0, Up: task.Ref{Lambda: "echo", ID: "up0"}, Status: task.StatusSuccess}}, t0))
		}, lifecycle.Unblocked},
		{"settle one upstream of two", func(t *testing.T) task.Task {
			return ok(t)(task.Settle(pending(t, 2), []task.Settled{{Index: 0, Up: task.Ref{Lambda: "echo", ID: "up0"}, Status: task.StatusSuccess}}, t0))
		}, ""},
		{"settle a failed upstream", func(t *testing.T) task.Task {
			return ok(t)(task.Settle(pending(t, 2), []task.Settled{{Index: 1, Up: task.Ref{Lambda: "echo", ID: "up1"}, Status: task.StatusDead}}, t0))
		}, lifecycle.UpstreamFailed},
		{"settle a removed upstream", func(t *testing.T) task.Task {
			return ok(t)(task.Settle(pending(t, 1), []task.Settled{{Index: 0, Up: task.Ref{Lambda: "echo", ID: "up0"}, Gone: true}}, t0))
		}, lifecycle.UpstreamFailed},
		{"end a cycle", func(t *testing.T) task.Task {
			return ok(t)(task.EndCycle(pending(t, 1), []string{"echo/a", "echo/up0", "echo/a"}, t0))
		}, lifecycle.UpstreamFailed},
		{"check a pending task", func(t *testing.T) task.Task { return ok(t)(task.Checked(pending(t, 1), t0)) }, ""},
		{"add upstreams", func(t *testing.T) task.Task {
			return ok(t)(task.AddUpstreams(newTask(t, "a", 3), []task.Ref{{Lambda: "echo", ID: "up0"}}, t0))
		}, ""},
		{"mark an ended task downstream", func(t *testing.T) task.Task {
			tk := ok(t)(task.Succeed(running(t, newTask(t, "a", 3)), "L", nil, t0, cfg))
			return ok(t)(task.MarkDownstream(tk, t0))
		}, ""},
		{"tell downstreams, on the task the end wrote", func(t *testing.T) task.Task {
			tk := running(t, newTask(t, "a", 3))
			tk.Downstream = true
			tk = ok(t)(task.Succeed(tk, "L", nil, t0, cfg))
			return ok(t)(task.Notified(tk, "", true, t0))
		}, ""},
	}
	schemas := loadSchemas(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk := tc.write(t)
			e, ok := lifecycle.Written(tk)
			if tc.want == "" {
				if ok {
					t.Fatalf("%s to %s: got event %s, want none", tk.From, tk.Status, e.Type)
				}
				return
			}
			if !ok || e.Type != tc.want {
				t.Fatalf("%s to %s: got %q (%v), want %s", tk.From, tk.Status, e.Type, ok, tc.want)
			}
			if e.ID != "echo/a/"+itoa(tk.Version) || e.Lambda != "echo" || e.TaskID != "a" || e.Version != tk.Version {
				t.Errorf("event %+v: want id echo/a/%d, of task echo/a at its version", e, tk.Version)
			}
			wantStatus, retryAt := tk.Status, tk.NextTriggerAt
			if tk.Status == task.StatusEnqueued && e.Type == lifecycle.Retried {
				// A retry sent ahead is told as one left waiting, at its retry's time.
				wantStatus, retryAt = task.StatusRetriableFailure, tk.NotBefore
			}
			if e.Status != wantStatus || e.PreviousStatus != tk.From || e.Attempt != tk.Attempts || e.MaxAttempts != tk.MaxAttempts || !e.Time.Equal(tk.UpdatedAt) {
				t.Errorf("event %+v does not describe the write %s → %s, attempt %d", e, tk.From, tk.Status, tk.Attempts)
			}
			validate(t, schemas, e)
			switch e.Type {
			case lifecycle.Retried:
				if e.RunAt == nil || !e.RunAt.Equal(*retryAt) || e.Error == "" {
					t.Errorf("retried event %+v: want run_at at the next attempt and the error", e)
				}
			case lifecycle.Failed, lifecycle.Dead, lifecycle.Dropped, lifecycle.UpstreamFailed:
				if e.Error == "" {
					t.Errorf("%s event without the error", e.Type)
				}
			case lifecycle.Started, lifecycle.Succeeded, lifecycle.Cancelled:
				if e.Error != "" {
					t.Errorf("%s event with error %q", e.Type, e.Error)
				}
			}
		})
	}
}

// pending returns a pending task waiting for n upstreams, up0...
func pending(t *testing.T, n int) task.Task {
	t.Helper()
	tk := newTask(t, "a", 3)
	tk.Status, tk.NextTriggerAt = task.StatusPending, nil
	for i := range n {
		tk.After = append(tk.After, task.Ref{Lambda: "echo", ID: "up" + itoa(int64(i))})
	}
	tk.AfterCount, tk.Trigger = n, task.TriggerAllSuccess
	return tk
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestCreated: a created task's event is scheduled, with its run time and deadline, whatever
// status it was created in, and no previous status.
func TestCreated(t *testing.T) {
	schemas := loadSchemas(t)
	tk := newTask(t, "a", 3)
	deadline := t0.Add(time.Hour)
	tk.Deadline = &deadline
	ahead, _, err := task.EnqueueAhead(tk, t0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []task.Task{tk, ahead} {
		e := lifecycle.Created(tk)
		validate(t, schemas, e)
		if e.Type != lifecycle.Scheduled || e.Status != tk.Status || e.PreviousStatus != "" || e.RunAt == nil || !e.RunAt.Equal(t0) || e.Deadline == nil || !e.Deadline.Equal(deadline) {
			t.Errorf("created %s: event %+v", tk.Status, e)
		}
	}
}

func loadSchemas(t *testing.T) eventschema.Schemas {
	t.Helper()
	s, err := eventschema.Load(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validate writes e as `atf dev --events stdout` does, and checks the line against its schema.
func validate(t *testing.T, schemas eventschema.Schemas, e lifecycle.Event) {
	t.Helper()
	var buf bytes.Buffer
	detail, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lifecycle.NewWriterSink(&buf).Put(t.Context(), []lifecycle.Entry{{DetailType: e.Type.DetailType(), Detail: detail, Time: e.Time}}); err != nil {
		t.Fatal(err)
	}
	dt, err := schemas.Validate(buf.Bytes())
	if err != nil {
		t.Errorf("%s", err)
	}
	if dt != e.Type.DetailType() {
		t.Errorf("event %s written as detail-type %s", e.Type, dt)
	}
	// Another type's schema refuses it.
	for other, s := range schemas {
		if other == dt {
			continue
		}
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(buf.Bytes()))
		if s.Validate(v) == nil {
			t.Errorf("the schema of %s takes a %s event", other, dt)
		}
	}
}
