package task

import (
	"errors"
	"testing"
	"time"
)

// TestEnqueueAhead: a task due within MaxSendAhead is enqueued at once, with a message delayed to
// its run time and carrying it, and a resend trigger an enqueue timeout after its run time; any
// other task is left to the consumer.
func TestEnqueueAhead(t *testing.T) {
	c := Config{}.WithDefaults()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	l := Lambda{Name: "l"}.WithDefaults()
	at := func(d time.Duration) Task {
		t.Helper()
		runAt := now.Add(d)
		tk, err := New(Spec{ID: "a", RunAt: &runAt}, l, now, c)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}

	next, m, err := EnqueueAhead(at(0), now, c)
	if err != nil || next.Status != StatusEnqueued || m.Delay != 0 || m.RunAt != nil || m.TaskID != "a" || m.Lambda != "l" {
		t.Fatalf("due now: %s, %+v, %v; want enqueued with an undelayed message", next.Status, m, err)
	}
	if want := now.Add(c.EnqueueTimeout); !next.NextTriggerAt.Equal(want) || next.Version != at(0).Version+1 {
		t.Fatalf("due now: trigger %s version %d, want %s and one more", next.NextTriggerAt, next.Version, want)
	}

	runAt := now.Add(90*time.Second + 500*time.Millisecond)
	next, m, err = EnqueueAhead(at(runAt.Sub(now)), now, c)
	if err != nil || m.Delay != 90*time.Second+500*time.Millisecond || m.RunAt == nil || !m.RunAt.Equal(runAt) || m.Early(now.Add(90*time.Second)) != 500*time.Millisecond {
		t.Fatalf("due in 90.5 s: %+v, %v; want a 90.5 s delay and the run time", m, err)
	}
	if want := runAt.Add(c.EnqueueTimeout); !next.NextTriggerAt.Equal(want) {
		t.Fatalf("due in 90.5 s: resend at %s, want %s", next.NextTriggerAt, want)
	}
	if m.Early(runAt.Add(time.Millisecond)) != 0 {
		t.Fatal("a message received after its run time waits")
	}

	if _, _, err := EnqueueAhead(at(MaxSendAhead+time.Second), now, c); !errors.Is(err, ErrNotDue) {
		t.Fatalf("due past MaxSendAhead: %v, want ErrNotDue", err)
	}
	if _, m, err := EnqueueAhead(at(MaxSendAhead), now, c); err != nil || m.Delay != MaxSendAhead {
		t.Fatalf("due at MaxSendAhead: %+v, %v; want a %s delay", m, err, MaxSendAhead)
	}
	late := at(time.Minute)
	deadline := now.Add(30 * time.Second)
	late.Deadline = &deadline
	if _, _, err := EnqueueAhead(late, now, c); !errors.Is(err, ErrNotDue) {
		t.Fatalf("deadline before the run time: %v, want ErrNotDue", err)
	}
	parked := at(0)
	parked.Parked = true
	if _, _, err := EnqueueAhead(parked, now, c); !errors.Is(err, ErrConflict) {
		t.Fatalf("parked: %v, want ErrConflict", err)
	}
	enq, _, _ := EnqueueAhead(at(0), now, c)
	if _, _, err := EnqueueAhead(enq, now, c); !errors.Is(err, ErrConflict) {
		t.Fatalf("enqueued already: %v, want ErrConflict", err)
	}
}

// TestHold: a claim that finds its gate closed hands the enqueued task back, new and due at once.
func TestHold(t *testing.T) {
	c := Config{}.WithDefaults()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	tk, _ := New(Spec{ID: "h"}, Lambda{Name: "l"}.WithDefaults(), now, c)
	enq, _, _ := EnqueueAhead(tk, now, c)
	later := now.Add(time.Minute)
	held, err := Hold(enq, later)
	if err != nil || held.Status != StatusNew || !held.NextTriggerAt.Equal(later) || held.Attempts != 0 {
		t.Fatalf("hold: %s due %s attempts %d, %v; want new, due %s", held.Status, held.NextTriggerAt, held.Attempts, err, later)
	}
	if _, err := Hold(tk, later); !errors.Is(err, ErrConflict) {
		t.Fatalf("hold of a new task: %v, want ErrConflict", err)
	}
	// A message that came before the task's run time hands it back due at that time, not now.
	soon, _ := New(Spec{ID: "s", Delay: ptrTo(10 * time.Minute)}, Lambda{Name: "l"}.WithDefaults(), now, c)
	enq, _, _ = EnqueueAhead(soon, now, c)
	held, err = Hold(enq, later)
	if err != nil || held.Status != StatusNew || !held.NextTriggerAt.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("early hold: %s due %s, %v; want new, due at its run time %s", held.Status, held.NextTriggerAt, err, now.Add(10*time.Minute))
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestGateMode(t *testing.T) {
	gates := []Gate{
		{Lambda: "a", Collection: "c1", Mode: GatePause},
		{Lambda: "a", Collection: "c2", Mode: GateDrop},
		{Lambda: "b", Mode: GatePause},
		{Lambda: "b", Collection: "c1", Mode: GateOpen},
		{Lambda: "c", Mode: GateOpen},
	}
	for _, tc := range []struct{ lambda, coll, want string }{
		{"a", "c1", GatePause}, {"a", "c2", GateDrop}, {"a", "c3", GateOpen}, {"a", "", GateOpen},
		{"b", "c1", GatePause}, {"b", "", GatePause}, {"c", "c1", GateOpen}, {"d", "c1", GateOpen},
	} {
		if got := GateMode(gates, tc.lambda, tc.coll); got != tc.want {
			t.Errorf("GateMode(%s, %q) = %s, want %s", tc.lambda, tc.coll, got, tc.want)
		}
	}
}
