package task

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var (
	now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg = Config{}.WithDefaults()
)

// inStatus returns a task in status s, due now, claimed once with lease "L" where that applies.
func inStatus(s Status) Task {
	t := Task{
		ID: "t", Lambda: "l", Priority: "normal", Status: s, MaxAttempts: 3, Attempts: 1,
		RunAt: now.Add(-time.Minute), Version: 7, NextTriggerAt: at(now.Add(-time.Second)),
		UpdatedAt: now.Add(-time.Minute),
	}
	if s == StatusClaimed || s == StatusProcessing {
		t.Lease = "L"
	}
	if s.Terminal() || s == StatusPending {
		t.NextTriggerAt = nil
	}
	return t
}

// TestTransitions runs every transition from every status. Allowed moves land in the expected
// status with the expected next trigger; every other start is refused with the expected error.
func TestTransitions(t *testing.T) {
	backoff := Backoff(1, cfg.BackoffBase, cfg.BackoffMax, 0.5)
	cases := []struct {
		name    string
		apply   func(Task) (Task, error)
		from    []Status
		refusal error
		to      Status
		trigger *time.Time // nil: none (terminal)
	}{
		{"unblock", func(t Task) (Task, error) { return Unblock(t, now) },
			[]Status{StatusPending}, ErrConflict, StatusNew, at(now)},
		{"enqueue", func(t Task) (Task, error) { return Enqueue(t, now, cfg) },
			[]Status{StatusNew, StatusRetriableFailure, StatusEnqueued}, ErrConflict, StatusEnqueued, at(now.Add(cfg.EnqueueTimeout))},
		{"claim", func(t Task) (Task, error) { return Claim(t, "M", now, cfg) },
			[]Status{StatusEnqueued}, ErrConflict, StatusProcessing, at(now.Add(cfg.HeartbeatTimeout))},
		{"heartbeat", func(t Task) (Task, error) { return Heartbeat(t, "L", now, cfg) },
			[]Status{StatusClaimed, StatusProcessing}, ErrStaleLease, StatusProcessing, at(now.Add(cfg.HeartbeatTimeout))},
		{"succeed", func(t Task) (Task, error) { return Succeed(t, "L", json.RawMessage(`1`), now, cfg) },
			[]Status{StatusClaimed, StatusProcessing}, ErrStaleLease, StatusSuccess, nil},
		{"fail retriable", func(t Task) (Task, error) { return Fail(t, "L", "x", true, now, cfg, 0.5) },
			[]Status{StatusClaimed, StatusProcessing}, ErrStaleLease, StatusRetriableFailure, at(now.Add(backoff))},
		{"fail fatal", func(t Task) (Task, error) { return Fail(t, "L", "x", false, now, cfg, 0.5) },
			[]Status{StatusClaimed, StatusProcessing}, ErrStaleLease, StatusFatalFailure, nil},
		{"timeout", func(t Task) (Task, error) { return Timeout(t, now, cfg, 0.5) },
			[]Status{StatusClaimed, StatusProcessing}, ErrConflict, StatusRetriableFailure, at(now.Add(backoff))},
		{"release", func(t Task) (Task, error) { return Release(t, "L", now) },
			[]Status{StatusClaimed, StatusProcessing}, ErrStaleLease, StatusNew, at(now)},
		{"unsent", func(t Task) (Task, error) { return Unsent(t, now, cfg) },
			[]Status{StatusEnqueued}, ErrConflict, StatusEnqueued, at(now.Add(cfg.PollInterval))},
		{"expire", func(t Task) (Task, error) { return Expire(t, now) },
			[]Status{StatusEnqueued, StatusClaimed, StatusProcessing}, ErrConflict, "", at(now)},
		{"cancel", func(t Task) (Task, error) { return Cancel(t, now) },
			Waiting, ErrConflict, StatusCancelled, nil},
		{"drop", func(t Task) (Task, error) { return Drop(t, now) },
			Waiting, ErrConflict, StatusDropped, nil},
		{"redrive", func(t Task) (Task, error) { return Redrive(t, RedriveOptions{}, now, cfg) },
			Failed, ErrConflict, StatusNew, at(now)},
		{"dead lettered", func(t Task) (Task, error) { return DeadLettered(t, 1, now, cfg) },
			[]Status{StatusEnqueued}, ErrConflict, StatusEnqueued, at(now.Add(cfg.EnqueueTimeout))},
		{"dead lettered for good", func(t Task) (Task, error) { return DeadLettered(t, MaxDeadLetterTrips, now, cfg) },
			[]Status{StatusEnqueued}, ErrConflict, StatusDead, nil},
	}
	for _, tc := range cases {
		for _, from := range Statuses {
			if tc.name == "cancel" && slices.Contains(Running, from) {
				// A cancel marks a running task rather than ending it: TestCancelRunning.
				continue
			}
			in := inStatus(from)
			before := in
			out, err := tc.apply(in)
			name := tc.name + " from " + string(from)
			if in.Version != before.Version || in.Status != before.Status || in.Lease != before.Lease {
				t.Fatalf("%s: mutated its input", name)
			}
			if !slices.Contains(tc.from, from) {
				if !errors.Is(err, tc.refusal) {
					t.Errorf("%s: got %v, want %v", name, err, tc.refusal)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			want := tc.to
			if want == "" {
				want = from // expire keeps the status
			}
			switch {
			case out.Status != want:
				t.Errorf("%s: status %s, want %s", name, out.Status, want)
			case out.From != from:
				t.Errorf("%s: From %q, want the status it moved from, %s", name, out.From, from)
			case out.Version != in.Version+1 || !out.UpdatedAt.Equal(now):
				t.Errorf("%s: version %d updated %s, want %d and now", name, out.Version, out.UpdatedAt, in.Version+1)
			case (tc.trigger == nil) != (out.NextTriggerAt == nil) || tc.trigger != nil && !tc.trigger.Equal(*out.NextTriggerAt):
				t.Errorf("%s: next trigger %v, want %v", name, out.NextTriggerAt, tc.trigger)
			case out.Status.Terminal() != (out.NextTriggerAt == nil):
				t.Errorf("%s: %s with trigger %v: terminal states have none, others have one", name, out.Status, out.NextTriggerAt)
			case (out.Status == StatusClaimed || out.Status == StatusProcessing) != (out.Lease != ""):
				t.Errorf("%s: %s with lease %q: only owned tasks hold a lease", name, out.Status, out.Lease)
			}
		}
	}
}

func TestAttemptsAndLeases(t *testing.T) {
	c, err := Claim(inStatus(StatusEnqueued), "M", now, cfg)
	if err != nil || c.Attempts != 2 || c.Lease != "M" || c.Status != StatusProcessing {
		t.Fatalf("claim: %s, attempts %d lease %q err %v; want processing, 2, M", c.Status, c.Attempts, c.Lease, err)
	}
	// The claim is the start: the lease holder heartbeats and reports on it with no other write.
	if h, err := Heartbeat(c, "M", now.Add(cfg.HeartbeatInterval), cfg); err != nil || h.Attempts != 2 || h.Lease != "M" {
		t.Fatalf("heartbeat after the claim: attempts %d lease %q err %v", h.Attempts, h.Lease, err)
	}
	if s, err := Succeed(c, "M", nil, now, cfg); err != nil || s.Status != StatusSuccess {
		t.Fatalf("result straight after the claim: %s, %v", s.Status, err)
	}
	if r, _ := Release(c, "M", now); r.Attempts != 1 {
		t.Fatalf("release: attempts %d, want the claim's attempt given back", r.Attempts)
	}
	for _, fn := range []func(Task) (Task, error){
		func(t Task) (Task, error) { return Heartbeat(t, "other", now, cfg) },
		func(t Task) (Task, error) { return Succeed(t, "other", nil, now, cfg) },
		func(t Task) (Task, error) { return Fail(t, "other", "x", true, now, cfg, 0) },
		func(t Task) (Task, error) { return Release(t, "other", now) },
	} {
		if _, err := fn(c); !errors.Is(err, ErrStaleLease) {
			t.Errorf("wrong lease: %v, want ErrStaleLease", err)
		}
	}
}

func TestDeadAndNotDue(t *testing.T) {
	last := inStatus(StatusProcessing)
	last.Attempts = last.MaxAttempts
	if got, _ := Fail(last, "L", "x", true, now, cfg, 0); got.Status != StatusDead || got.Error != "x" {
		t.Errorf("retriable failure of the last attempt: %s, want dead", got.Status)
	}
	if got, _ := Timeout(last, now, cfg, 0); got.Status != StatusDead {
		t.Errorf("timeout of the last attempt: %s, want dead", got.Status)
	}
	soon := inStatus(StatusProcessing)
	soon.Deadline = at(now.Add(time.Millisecond)) // the backoff ends after it
	if got, _ := Fail(soon, "L", "x", true, now, cfg, 0); got.Status != StatusDead {
		t.Errorf("retry past the deadline: %s, want dead", got.Status)
	}
	late := inStatus(StatusNew)
	late.Deadline = at(now.Add(-time.Second))
	if got, _ := Enqueue(late, now, cfg); got.Status != StatusDead || !strings.Contains(got.Error, "deadline") {
		t.Errorf("enqueue past the deadline: %s %q, want dead", got.Status, got.Error)
	}
	future := inStatus(StatusNew)
	future.NextTriggerAt = at(now.Add(time.Second))
	if _, err := Enqueue(future, now, cfg); !errors.Is(err, ErrNotDue) {
		t.Errorf("enqueue before due: %v, want ErrNotDue", err)
	}
	running := inStatus(StatusProcessing)
	running.NextTriggerAt = at(now.Add(time.Second))
	if _, err := Timeout(running, now, cfg, 0); !errors.Is(err, ErrNotDue) {
		t.Errorf("timeout before due: %v, want ErrNotDue", err)
	}
	big := make(json.RawMessage, cfg.PayloadLimit+1)
	if got, _ := Succeed(inStatus(StatusProcessing), "L", big, now, cfg); got.Status != StatusFatalFailure {
		t.Errorf("result over the limit: %s, want fatal_failure", got.Status)
	}
}

// TestCancelRunning: a cancel of a running task marks it and leaves it running under its lease;
// from then on every way out of the run ends it cancelled, and never writes a success.
func TestCancelRunning(t *testing.T) {
	for _, from := range Running {
		in := inStatus(from)
		in.NextTriggerAt = at(now.Add(10 * time.Second))
		marked, err := Cancel(in, now)
		switch {
		case err != nil:
			t.Fatalf("cancel %s: %v", from, err)
		case !marked.CancelRequested || marked.Status != from || marked.Lease != "L" || marked.Version != in.Version+1:
			t.Fatalf("cancel %s: %s, requested %t, lease %q, version %d; want it marked, still %s under L, version %d",
				from, marked.Status, marked.CancelRequested, marked.Lease, marked.Version, from, in.Version+1)
		case !marked.NextTriggerAt.Equal(*in.NextTriggerAt):
			t.Errorf("cancel %s: trigger %s, want the lease's end %s kept", from, marked.NextTriggerAt, in.NextTriggerAt)
		}
		if _, err := Cancel(marked, now); !errors.Is(err, ErrConflict) {
			t.Errorf("cancel %s twice: %v, want ErrConflict", from, err)
		}
		if _, err := Heartbeat(marked, "L", now, cfg); !errors.Is(err, ErrCancelled) {
			t.Errorf("heartbeat of a cancelled %s task: %v, want ErrCancelled", from, err)
		}
		if _, err := Heartbeat(marked, "other", now, cfg); !errors.Is(err, ErrStaleLease) {
			t.Errorf("heartbeat with another lease: %v, want ErrStaleLease", err)
		}
		if _, err := CancelRunning(marked, "other", now); !errors.Is(err, ErrStaleLease) {
			t.Errorf("cancelled reported with another lease: %v, want ErrStaleLease", err)
		}
		if _, err := CancelRunning(in, "L", now); !errors.Is(err, ErrConflict) {
			t.Errorf("cancelled reported for a task never cancelled: %v, want ErrConflict", err)
		}
		due := marked
		due.NextTriggerAt = at(now.Add(-time.Second))
		for name, end := range map[string]func() (Task, error){
			"reported":        func() (Task, error) { return CancelRunning(marked, "L", now) },
			"succeed":         func() (Task, error) { return Succeed(marked, "L", json.RawMessage(`{"ok":1}`), now, cfg) },
			"fail retriable":  func() (Task, error) { return Fail(marked, "L", "boom", true, now, cfg, 0.5) },
			"fail fatal":      func() (Task, error) { return Fail(marked, "L", "boom", false, now, cfg, 0.5) },
			"timeout":         func() (Task, error) { return Timeout(due, now, cfg, 0.5) },
			"release":         func() (Task, error) { return Release(marked, "L", now) },
			"timeout, no cap": func() (Task, error) { d := due; d.Attempts = 1; return Timeout(d, now, cfg, 0.5) },
		} {
			out, err := end()
			switch {
			case err != nil:
				t.Errorf("%s after cancel of %s: %v", name, from, err)
			case out.Status != StatusCancelled || out.NextTriggerAt != nil || out.Lease != "" || out.CancelRequested:
				t.Errorf("%s after cancel of %s: %s, trigger %v, lease %q, requested %t; want cancelled, ended, mark cleared",
					name, from, out.Status, out.NextTriggerAt, out.Lease, out.CancelRequested)
			case out.Result != nil || !strings.HasPrefix(out.Error, "cancelled while running"):
				t.Errorf("%s after cancel of %s: result %s, error %q; want no result and why", name, from, out.Result, out.Error)
			case out.Attempts != marked.Attempts:
				t.Errorf("%s after cancel of %s: attempts %d, want %d", name, from, out.Attempts, marked.Attempts)
			}
		}
	}
	// A result written first ends the task: the cancel then finds it ended.
	done, err := Succeed(inStatus(StatusProcessing), "L", json.RawMessage(`1`), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Cancel(done, now); !errors.Is(err, ErrConflict) {
		t.Errorf("cancel after success: %v, want ErrConflict", err)
	}
}

func TestBackoff(t *testing.T) {
	base, maxD := time.Second, 10*time.Second
	for _, tc := range []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond}, {1, 0.999999, base}, {2, 0, base}, {3, 0, 2 * time.Second},
		{4, 0, 4 * time.Second}, {5, 0, 5 * time.Second}, {50, 0.999999, maxD},
	} {
		if got := Backoff(tc.attempt, base, maxD, tc.jitter); got.Round(time.Millisecond) != tc.want {
			t.Errorf("Backoff(%d, jitter %v) = %s, want %s", tc.attempt, tc.jitter, got, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	l := Lambda{Name: "l"}.WithDefaults()
	d, neg, far := time.Minute, -time.Second, MaxDelay+time.Hour
	runAt, past := now.Add(time.Hour), now.Add(-time.Hour)
	tk, err := New(Spec{Payload: json.RawMessage(`{ "a" : 1 }`), Delay: &d}, l, now, cfg)
	if err != nil || len(tk.ID) != 26 || tk.Priority != "normal" || tk.MaxAttempts != cfg.MaxAttempts ||
		!tk.RunAt.Equal(now.Add(d)) || !tk.NextTriggerAt.Equal(now.Add(d)) || string(tk.Payload) != `{"a":1}` || tk.Status != StatusNew {
		t.Fatalf("defaults: %+v %v", tk, err)
	}
	again, _ := New(Spec{Payload: json.RawMessage(`{"a":1}`), Delay: &d, ID: tk.ID}, l, now.Add(time.Minute), cfg)
	if again.Spec != tk.Spec {
		t.Error("the same request later has another fingerprint")
	}
	other, _ := New(Spec{Payload: json.RawMessage(`{"a":2}`), Delay: &d, ID: tk.ID}, l, now, cfg)
	if other.Spec == tk.Spec {
		t.Error("another payload has the same fingerprint")
	}
	if tk, _ := New(Spec{RunAt: &runAt}, l, now, cfg); !tk.RunAt.Equal(runAt) {
		t.Errorf("run_at: %s", tk.RunAt)
	}
	if tk, _ := New(Spec{RunAt: &past}, l, now, cfg); !tk.RunAt.Equal(now) {
		t.Errorf("run_at in the past runs now, got %s", tk.RunAt)
	}
	for name, s := range map[string]Spec{
		"bad id":           {ID: "no spaces"},
		"bad collection":   {Collection: "-x"},
		"unknown priority": {Priority: "urgent"},
		"run_at and delay": {RunAt: &runAt, Delay: &d},
		"negative delay":   {Delay: &neg},
		"delay too far":    {Delay: &far},
		"max attempts":     {MaxAttempts: MaxAttemptsLimit + 1},
		"deadline early":   {Deadline: &past},
		"after bad id":     {After: []Ref{{ID: "no spaces"}}},
		"after bad lambda": {After: []Ref{{Lambda: "No", ID: "x"}}},
		"after twice":      {After: []Ref{{ID: "x"}, {Lambda: l.Name, ID: "x"}}},
		"after itself":     {ID: "me", After: []Ref{{ID: "me"}}},
		"trigger unknown":  {After: []Ref{{ID: "x"}}, Trigger: "some"},
		"trigger alone":    {Trigger: TriggerAllDone},
		"payload not json": {Payload: json.RawMessage(`{`)},
	} {
		if _, err := New(s, l, now, cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New(Spec{Payload: make(json.RawMessage, cfg.PayloadLimit+1)}, l, now, cfg); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large payload: %v, want ErrTooLarge", err)
	}
}

func TestIDsSortByTime(t *testing.T) {
	a, b := NewID(now), NewID(now.Add(time.Millisecond))
	l1, l2 := NewLease(), NewLease()
	if len(a) != 26 || a >= b || NewID(now) == a || l1 == l2 {
		t.Fatalf("ids %s %s", a, b)
	}
}

func TestConfig(t *testing.T) {
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.HeartbeatTimeout = 3 * bad.HeartbeatInterval
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "HeartbeatTimeout") {
		t.Errorf("heartbeat timeout within 3 intervals: %v", err)
	}
	bad = cfg
	bad.LeaseMargin = bad.HeartbeatTimeout - 3*bad.HeartbeatInterval
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "LeaseMargin") {
		t.Errorf("a lease margin that leaves room for only 3 heartbeats: %v", err)
	}
	if d := (Config{}).WithDefaults(); d.LeaseMargin != DefaultHeartbeatTimeout/6 || d.Validate() != nil {
		t.Errorf("default lease margin %s, want a sixth of the heartbeat timeout", d.LeaseMargin)
	}
	bad = cfg
	bad.MaxAttempts = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Errorf("max attempts 0: %v", err)
	}
	if err := (Lambda{Name: "Bad"}).WithDefaults().Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("lambda name: %v", err)
	}
}

// TestFailCapsError: a failure keeps at most MaxErrorBytes of its error, cut between characters,
// with a marker that says so; a short error is kept as it is.
func TestFailCapsError(t *testing.T) {
	c := Config{}.WithDefaults()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tk := Task{ID: "e", Status: StatusProcessing, Lease: "l", Attempts: 1, MaxAttempts: 3}
	long := strings.Repeat("é", 1<<19) // 1 MiB of two-byte characters
	for _, retriable := range []bool{false, true} {
		got, err := Fail(tk, "l", long, retriable, now, c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Error) > MaxErrorBytes || !utf8.ValidString(got.Error) || !strings.HasPrefix(got.Error, "éé") ||
			!strings.Contains(got.Error, "truncated from 1048576 bytes") {
			t.Errorf("retriable %v: error of %d bytes (valid UTF-8: %v) ending %q; want at most %d, valid, with a marker",
				retriable, len(got.Error), utf8.ValidString(got.Error), got.Error[max(0, len(got.Error)-60):], MaxErrorBytes)
		}
	}
	short := strings.Repeat("x", MaxErrorBytes)
	if got, _ := Fail(tk, "l", short, false, now, c, 0); got.Error != short {
		t.Errorf("an error of exactly MaxErrorBytes was changed to %d bytes", len(got.Error))
	}
}

// TestPark: a gate parks a waiting task where it stands and puts it back unchanged but for the
// version; any other move clears the mark.
func TestPark(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{}.WithDefaults()
	tk, err := New(Spec{ID: "p", Collection: "c"}, Lambda{Name: "l"}.WithDefaults(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	parked, err := Park(tk, now.Add(time.Second))
	if err != nil || !parked.Parked || parked.Status != StatusNew || !parked.NextTriggerAt.Equal(*tk.NextTriggerAt) || parked.Version != tk.Version+1 {
		t.Fatalf("Park: %+v, %v; want the task parked as it was, one version on", parked, err)
	}
	back, err := Unpark(parked, now.Add(2*time.Second))
	if err != nil || back.Parked || !back.NextTriggerAt.Equal(*tk.NextTriggerAt) || back.Version != tk.Version+2 {
		t.Fatalf("Unpark: %+v, %v; want it back at its trigger", back, err)
	}
	if _, err := Unpark(back, now); !errors.Is(err, ErrConflict) {
		t.Errorf("Unpark of a task not parked: %v, want ErrConflict", err)
	}
	if dropped, err := Drop(parked, now); err != nil || dropped.Parked {
		t.Errorf("Drop of a parked task: %+v, %v; want dropped and no longer parked", dropped, err)
	}
	enq, _ := Enqueue(tk, now, cfg)
	claimed, _ := Claim(enq, "lease", now, cfg)
	if _, err := Park(claimed, now); !errors.Is(err, ErrConflict) {
		t.Errorf("Park of a claimed task: %v, want ErrConflict", err)
	}
}

// TestEnqueueAgainBacksOff: a task whose message went unclaimed is enqueued again after the
// enqueue timeout, then after twice as long each time, up to MaxEnqueueWait, so a queue that does
// not drain gets about log2(wait / EnqueueTimeout) extra messages per task, not one per timeout.
// A task made due by Unsent or Expire starts again from the enqueue timeout.
func TestEnqueueAgainBacksOff(t *testing.T) {
	tk := inStatus(StatusNew)
	clock := now
	var waits []time.Duration
	for range 12 {
		next, err := Enqueue(tk, clock, cfg)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, next.NextTriggerAt.Sub(clock))
		tk, clock = next, *next.NextTriggerAt
	}
	want := cfg.EnqueueTimeout
	for i, w := range waits {
		if w != want {
			t.Fatalf("wait %d is %s, want %s (waits %v)", i, w, want, waits)
		}
		want = min(2*want, MaxEnqueueWait)
	}
	if waits[len(waits)-1] != MaxEnqueueWait {
		t.Errorf("waits %v never reach MaxEnqueueWait", waits)
	}
	for _, reset := range []func(Task, time.Time) (Task, error){
		func(t Task, at time.Time) (Task, error) { return Unsent(t, at, cfg) },
		func(t Task, at time.Time) (Task, error) { return Expire(t, at) },
	} {
		due, err := reset(tk, clock)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Enqueue(due, *due.NextTriggerAt, cfg)
		if err != nil || again.NextTriggerAt.Sub(*due.NextTriggerAt) != cfg.EnqueueTimeout {
			t.Errorf("after a reset: wait %v (%v), want the enqueue timeout", again.NextTriggerAt.Sub(*due.NextTriggerAt), err)
		}
	}
}
