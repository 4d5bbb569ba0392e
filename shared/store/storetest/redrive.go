package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testRedrive: Store.Redrive writes a redriven task like Update, with its payload, old or new,
// small or large, and its upstreams, so that Get reads the task alive again as written; and it
// is conditional like Update.
func testRedrive(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	large := json.RawMessage(`"` + strings.Repeat("p", 2000) + `"`) // an item of its own on DynamoDB
	cases := []struct {
		name     string
		payload  json.RawMessage
		after    bool
		options  task.RedriveOptions
		wantLoad json.RawMessage
	}{
		{"small kept", json.RawMessage(`{"n":1}`), false, task.RedriveOptions{}, json.RawMessage(`{"n":1}`)},
		{"large kept", large, false, task.RedriveOptions{}, large},
		{"none kept", nil, false, task.RedriveOptions{}, nil},
		{"small to large", json.RawMessage(`{"n":1}`), false, task.RedriveOptions{Payload: large}, large},
		{"large to small", large, false, task.RedriveOptions{Payload: json.RawMessage(`{"n":2}`), MaxAttempts: 9, Priority: "low"}, json.RawMessage(`{"n":2}`)},
		{"with upstreams", large, true, task.RedriveOptions{}, large},
	}
	for _, c := range cases {
		id := strings.ReplaceAll(c.name, " ", "-")
		tk := plain(l, id, now)
		tk.Payload = c.payload
		if c.after {
			tk.After = []task.Ref{{Lambda: l, ID: "up-1"}, {Lambda: "other", ID: "up-2"}}
			tk.AfterCount, tk.Trigger, tk.Settled = 2, task.TriggerAllSuccess, task.Bitmap{3}
		}
		create(t, s, tk)
		// Its life: run, then dead, as the consumer and the status controller write it.
		dead := tk
		dead.Status, dead.Attempts, dead.Error, dead.NextTriggerAt = task.StatusDead, 5, "boom", nil
		dead.Version, dead.UpdatedAt = tk.Version+1, now.Add(time.Second)
		if err := s.Update(ctx, dead, tk.Version); err != nil {
			t.Fatalf("%s: Update to dead: %v", c.name, err)
		}
		read, err := s.Get(ctx, l, id)
		if err != nil {
			t.Fatalf("%s: Get: %v", c.name, err)
		}
		next, err := task.Redrive(read, c.options, now.Add(2*time.Second), cfg)
		if err != nil {
			t.Fatalf("%s: task.Redrive: %v", c.name, err)
		}
		if err := s.Redrive(ctx, next, read.Version); err != nil {
			t.Fatalf("%s: Redrive: %v", c.name, err)
		}
		if !bytes.Equal(next.Payload, c.wantLoad) {
			t.Fatalf("%s: the transition's payload is %.40s, want %.40s", c.name, next.Payload, c.wantLoad)
		}
		mustEqual(t, s, next)
		// A second writer from the dead version is too late, and changes nothing.
		if err := s.Redrive(ctx, next, read.Version); !errors.Is(err, task.ErrConflict) {
			t.Errorf("%s: Redrive from a stale version: %v, want ErrConflict", c.name, err)
		}
		mustEqual(t, s, next)
		// The second life is a life like the first: it runs and ends, and Update keeps the
		// payload that Redrive wrote.
		done := next
		done.Status, done.NextTriggerAt, done.Version, done.Error = task.StatusSuccess, nil, next.Version+1, ""
		if err := s.Update(ctx, done, next.Version); err != nil {
			t.Fatalf("%s: Update to success: %v", c.name, err)
		}
		mustEqual(t, s, done)
	}
	ghost := plain(l, "ghost", now)
	if err := s.Redrive(ctx, ghost, 1); !errors.Is(err, task.ErrConflict) {
		t.Errorf("Redrive of a missing task: %v, want ErrConflict", err)
	}
	if _, err := s.Get(ctx, l, "ghost"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get after Redrive of a missing task: %v, want ErrNotFound", err)
	}
	counts, err := s.Counts(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusSuccess] != len(cases) || counts[task.StatusDead] != 0 || counts[task.StatusNew] != 0 {
		t.Errorf("counts after redrives: %v, want %d success", counts, len(cases))
	}
}
