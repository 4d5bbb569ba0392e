package task

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRedriveFreshLife(t *testing.T) {
	for _, from := range Failed {
		dead := inStatus(from)
		dead.Attempts, dead.MaxAttempts, dead.Error = 3, 3, "boom"
		dead.Payload, dead.Result = json.RawMessage(`{"a":1}`), json.RawMessage(`"partial"`)
		got, err := Redrive(dead, RedriveOptions{}, now, cfg)
		if err != nil {
			t.Fatalf("redrive from %s: %v", from, err)
		}
		if got.Status != StatusNew || got.Attempts != 0 || got.MaxAttempts != 3 || got.Version != dead.Version+1 {
			t.Errorf("redrive from %s: %s attempts %d/%d version %d; want new 0/3 version %d", from, got.Status, got.Attempts, got.MaxAttempts, got.Version, dead.Version+1)
		}
		if got.NextTriggerAt == nil || !got.NextTriggerAt.Equal(now) {
			t.Errorf("redrive from %s: due %v, want now", from, got.NextTriggerAt)
		}
		// The last life's error stays until the new one replaces or clears it, as between retries.
		if got.Error != "boom" || got.Result != nil || string(got.Payload) != `{"a":1}` {
			t.Errorf("redrive from %s: error %q result %s payload %s", from, got.Error, got.Result, got.Payload)
		}
		// The new life runs its whole budget again, then dies again.
		for i := range 3 {
			e, _ := Enqueue(got, now, cfg)
			c, err := Claim(e, "L", now, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, _ = Fail(c, "L", "again", true, now, cfg, 0)
			if want := StatusRetriableFailure; i == 2 {
				if got.Status != StatusDead {
					t.Fatalf("attempt %d of the new life: %s, want dead", i+1, got.Status)
				}
			} else if got.Status != want {
				t.Fatalf("attempt %d of the new life: %s, want %s", i+1, got.Status, want)
			}
			got.NextTriggerAt = at(now)
		}
	}
}

func TestRedriveOptions(t *testing.T) {
	dead := inStatus(StatusDead)
	got, err := Redrive(dead, RedriveOptions{MaxAttempts: 9, Payload: json.RawMessage(`{"fixed":true}`), Priority: "high"}, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxAttempts != 9 || string(got.Payload) != `{"fixed":true}` || got.Priority != "high" {
		t.Errorf("redrive with options: max %d payload %s priority %s", got.MaxAttempts, got.Payload, got.Priority)
	}
	l := Lambda{Name: "l"}.WithDefaults()
	for _, o := range []RedriveOptions{
		{Priority: "urgent"},
		{MaxAttempts: MaxAttemptsLimit + 1},
		{MaxAttempts: -1},
		{Payload: json.RawMessage(`{"a":`)},
		{Payload: json.RawMessage(`"` + strings.Repeat("x", cfg.PayloadLimit) + `"`)},
	} {
		if err := o.Check(l, cfg); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
			t.Errorf("Check(%+v): %v, want invalid or too large", o.MaxAttempts, err)
		}
	}
	if err := (RedriveOptions{Priority: "low", MaxAttempts: 2, Payload: json.RawMessage(`[]`)}).Check(l, cfg); err != nil {
		t.Errorf("Check of good options: %v", err)
	}
	big := RedriveOptions{Payload: json.RawMessage(`"` + strings.Repeat("x", cfg.PayloadLimit) + `"`)}
	if _, err := Redrive(dead, big, now, cfg); !errors.Is(err, ErrTooLarge) {
		t.Errorf("redrive with a payload over the limit: %v, want too large", err)
	}
}

func TestRedriveRefusals(t *testing.T) {
	down := inStatus(StatusDead)
	down.Downstream = true
	if _, err := Redrive(down, RedriveOptions{}, now, cfg); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "downstreams") {
		t.Errorf("redrive of a task with downstreams: %v, want a conflict naming them", err)
	}
	late := inStatus(StatusFatalFailure)
	late.Deadline = at(now.Add(-time.Second))
	if _, err := Redrive(late, RedriveOptions{}, now, cfg); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("redrive past the deadline: %v, want a conflict naming it", err)
	}
}

func TestListParamsMatches(t *testing.T) {
	tk := inStatus(StatusDead)
	tk.Collection, tk.CreatedAt = "c", now
	cases := []struct {
		p    ListParams
		want bool
	}{
		{ListParams{}, true},
		{ListParams{Statuses: Failed}, true},
		{ListParams{Status: StatusSuccess, Statuses: []Status{StatusDead}}, true},
		{ListParams{Status: StatusSuccess}, false},
		{ListParams{Collection: "other"}, false},
		{ListParams{CreatedFrom: now}, true},
		{ListParams{CreatedFrom: now.Add(time.Nanosecond)}, false},
		{ListParams{CreatedTo: now}, false},
		{ListParams{CreatedTo: now.Add(time.Nanosecond)}, true},
	}
	for _, c := range cases {
		if got := c.p.Matches(tk); got != c.want {
			t.Errorf("%+v matches: %v, want %v", c.p, got, c.want)
		}
	}
	if set := (ListParams{Status: StatusDead, Statuses: Failed}).StatusSet(); len(set) != 2 {
		t.Errorf("StatusSet repeats: %v", set)
	}
}

func TestDeadLettered(t *testing.T) {
	parked := inStatus(StatusEnqueued)
	parked.Parked = true
	if _, err := DeadLettered(parked, 1, now, cfg); !errors.Is(err, ErrConflict) {
		t.Errorf("dead lettered while parked: %v, want a conflict", err)
	}
	dead, err := DeadLettered(inStatus(StatusEnqueued), MaxDeadLetterTrips, now, cfg)
	if err != nil || dead.Status != StatusDead || !strings.Contains(dead.Error, "dead-letter queue 3 times") {
		t.Errorf("at the last trip: %s %q %v", dead.Status, dead.Error, err)
	}
	// A dead-lettered task is a failed task like any other: it can be redriven.
	if r, err := Redrive(dead, RedriveOptions{}, now, cfg); err != nil || r.Status != StatusNew {
		t.Errorf("redrive of a dead-lettered task: %s %v", r.Status, err)
	}
}
