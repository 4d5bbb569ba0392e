package task

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSnooze: a snooze gives the run's attempt back and makes the task new, due after the delay,
// its lease released; the run is in the history as snoozed, and the snooze is counted.
func TestSnooze(t *testing.T) {
	running := inStatus(StatusProcessing)
	running.Error, running.HandBacks = "the failure before", 2
	got, err := Snooze(running, "L", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusNew || got.Attempts != 0 || got.Snoozes != 1 || got.Lease != "" || got.HandBacks != 0 ||
		!got.NextTriggerAt.Equal(now.Add(time.Minute)) || got.Version != running.Version+1 {
		t.Errorf("snoozed: %s, %d attempts, %d snoozes, lease %q, %d hand-backs, due %v, version %d; want new, 0, 1, none, 0, due %v, version %d",
			got.Status, got.Attempts, got.Snoozes, got.Lease, got.HandBacks, got.NextTriggerAt, got.Version, now.Add(time.Minute), running.Version+1)
	}
	if got.Error != "the failure before" {
		t.Errorf("error %q: a snooze keeps the task's error", got.Error)
	}
	if got.Ended == nil || got.Ended.Outcome != OutcomeSnoozed || got.Ended.Error != "snoozed for 1m0s by its handler" || !got.EndedAt.Equal(now) {
		t.Errorf("ended attempt %+v: want outcome snoozed, saying for how long", got.Ended)
	}
	for _, d := range []time.Duration{-time.Second, MaxDelay + time.Second} {
		if _, err := Snooze(running, "L", d, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("snooze for %s: %v, want ErrInvalid", d, err)
		}
	}
	if _, err := Snooze(running, "other", time.Minute, now); !errors.Is(err, ErrStaleLease) {
		t.Errorf("snooze under another lease: %v, want ErrStaleLease", err)
	}
	cancelled := running
	cancelled.CancelRequested = true
	if got, err := Snooze(cancelled, "L", time.Minute, now); err != nil || got.Status != StatusCancelled {
		t.Errorf("snooze of a task whose cancel was accepted: %s, %v; want cancelled", got.Status, err)
	}
}

// TestSnoozeDeadline: the deadline wins over a snooze: a task whose deadline comes before its
// wake time is dead, with an error that says so.
func TestSnoozeDeadline(t *testing.T) {
	running := inStatus(StatusProcessing)
	running.Deadline = at(now.Add(30 * time.Second))
	got, err := Snooze(running, "L", time.Minute, now)
	if err != nil || got.Status != StatusDead || got.NextTriggerAt != nil || !strings.Contains(got.Error, "past its deadline") {
		t.Fatalf("snoozed past the deadline: %s, due %v, error %q, %v; want dead, saying why", got.Status, got.NextTriggerAt, got.Error, err)
	}
	if got.Ended == nil || got.Ended.Outcome != OutcomeSnoozed {
		t.Errorf("ended attempt %+v: want outcome snoozed", got.Ended)
	}
	if got, err := Snooze(running, "L", 20*time.Second, now); err != nil || got.Status != StatusNew {
		t.Errorf("snoozed within the deadline: %s, %v; want new", got.Status, err)
	}
}

// TestSnoozeBound: past MaxSnoozes a snooze counts as an attempt, so a task that snoozes forever
// ends dead once its attempts are used up.
func TestSnoozeBound(t *testing.T) {
	running := inStatus(StatusProcessing)
	running.Snoozes = MaxSnoozes
	got, err := Snooze(running, "L", time.Minute, now)
	if err != nil || got.Status != StatusRetriableFailure || got.Attempts != running.Attempts || !got.NextTriggerAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("snooze past the bound: %s, %d attempts, due %v, %v; want retriable_failure, %d attempts, due in 1m",
			got.Status, got.Attempts, got.NextTriggerAt, err, running.Attempts)
	}
	if got.Ended.Outcome != OutcomeRetriable || !strings.Contains(got.Error, "MaxSnoozes") {
		t.Errorf("snooze past the bound: outcome %s, error %q; want retriable, naming the bound", got.Ended.Outcome, got.Error)
	}
	running.Attempts = running.MaxAttempts
	if got, err := Snooze(running, "L", time.Minute, now); err != nil || got.Status != StatusDead {
		t.Errorf("snooze past the bound at the last attempt: %s, %v; want dead", got.Status, err)
	}
	// Snoozes up to the bound count no attempt, however many.
	tk := inStatus(StatusProcessing)
	for i := range MaxSnoozes {
		if tk, err = Snooze(tk, "L", 0, now); err != nil || tk.Status != StatusNew {
			t.Fatalf("snooze %d: %s, %v", i+1, tk.Status, err)
		}
		tk = claimed(t, tk)
	}
	if tk.Attempts != 1 || tk.Snoozes != MaxSnoozes {
		t.Errorf("after %d snoozes: %d attempts, %d snoozes; want 1, %d", MaxSnoozes, tk.Attempts, tk.Snoozes, MaxSnoozes)
	}
	dead := inStatus(StatusDead)
	dead.Snoozes = MaxSnoozes
	redriven, err := Redrive(dead, RedriveOptions{}, now, cfg)
	if err != nil || redriven.Snoozes != 0 {
		t.Errorf("redriven: %d snoozes, %v; want 0", redriven.Snoozes, err)
	}
}

// claimed is tk enqueued and claimed again under lease "L".
func claimed(t *testing.T, tk Task) Task {
	t.Helper()
	enq, err := Enqueue(tk, *tk.NextTriggerAt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Claim(enq, "L", *tk.NextTriggerAt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetryAfter: a retry after the handler's delay fails the attempt as a retriable failure
// does, due after that delay rather than the backoff; attempts and the deadline still end it.
func TestRetryAfter(t *testing.T) {
	running := inStatus(StatusProcessing)
	got, err := RetryAfter(running, "L", "rate limited", 3*time.Hour, now)
	if err != nil || got.Status != StatusRetriableFailure || got.Attempts != 1 || got.Error != "rate limited" ||
		!got.NextTriggerAt.Equal(now.Add(3*time.Hour)) || got.Ended.Outcome != OutcomeRetriable {
		t.Fatalf("retry after 3h: %s, %d attempts, error %q, due %v, %v; want retriable_failure due in 3h", got.Status, got.Attempts, got.Error, got.NextTriggerAt, err)
	}
	last := running
	last.Attempts = last.MaxAttempts
	if got, err := RetryAfter(last, "L", "x", time.Second, now); err != nil || got.Status != StatusDead {
		t.Errorf("retry after, attempts used up: %s, %v; want dead", got.Status, err)
	}
	running.Deadline = at(now.Add(time.Hour))
	if got, err := RetryAfter(running, "L", "x", 2*time.Hour, now); err != nil || got.Status != StatusDead {
		t.Errorf("retry after the deadline: %s, %v; want dead", got.Status, err)
	}
	if _, err := RetryAfter(running, "L", "x", -time.Second, now); !errors.Is(err, ErrInvalid) {
		t.Errorf("retry after a negative delay: %v, want ErrInvalid", err)
	}
	if _, err := RetryAfter(inStatus(StatusNew), "L", "x", time.Second, now); !errors.Is(err, ErrStaleLease) {
		t.Errorf("retry after of a task not running: %v, want ErrStaleLease", err)
	}
}

// TestLambdaBackoff: a lambda's backoff replaces the config's for its retries, timeouts included.
func TestLambdaBackoff(t *testing.T) {
	l := Lambda{Name: "l", Backoff: &BackoffPolicy{Base: time.Minute, Factor: 3, Max: 5 * time.Minute}}.WithDefaults()
	lcfg := l.Config(cfg)
	if err := lcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for attempts, want := range map[int]time.Duration{1: time.Minute, 2: 3 * time.Minute, 3: 5 * time.Minute} {
		running := inStatus(StatusProcessing)
		running.Attempts, running.MaxAttempts = attempts, 10
		got, err := Fail(running, "L", "x", true, now, lcfg, 0.7)
		if err != nil || !got.NextTriggerAt.Equal(now.Add(want)) {
			t.Errorf("retry %d: due %v, %v; want in %s", attempts, got.NextTriggerAt, err, want)
		}
		running.Status, running.NextTriggerAt = StatusProcessing, at(now)
		if got, err := Timeout(running, now, lcfg, 0.7); err != nil || !got.NextTriggerAt.Equal(now.Add(want)) {
			t.Errorf("timeout %d: due %v, %v; want in %s", attempts, got.NextTriggerAt, err, want)
		}
	}
	// A lambda without one keeps the config's.
	if got := (Lambda{Name: "plain"}).Config(cfg); got.Backoff != nil {
		t.Errorf("a lambda without a backoff sets %+v", got.Backoff)
	}
}

func TestBackoffPolicyDelay(t *testing.T) {
	for _, tc := range []struct {
		p      BackoffPolicy
		retry  int
		random float64
		want   time.Duration
	}{
		{BackoffPolicy{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: 0.5}, 1, 0, 500 * time.Millisecond},
		{BackoffPolicy{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: 0.5}, 3, 0.5, 3 * time.Second},
		{BackoffPolicy{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: 0.5}, 40, 0, 30 * time.Second},
		{BackoffPolicy{Base: 10 * time.Second, Factor: 1.5, Max: time.Hour, Jitter: 0}, 3, 0.9, 22500 * time.Millisecond},
		{BackoffPolicy{Base: 10 * time.Second, Factor: 1, Max: time.Hour, Jitter: 1}, 5, 0, 0},
		{BackoffPolicy{Base: 10 * time.Second, Factor: 1, Max: time.Hour, Jitter: 1}, 5, 0.25, 2500 * time.Millisecond},
		{BackoffPolicy{Base: time.Hour, Factor: 10, Max: MaxBackoff, Jitter: 0}, 1000, 0, MaxBackoff},
	} {
		if got := tc.p.Delay(tc.retry, tc.random); got != tc.want {
			t.Errorf("%+v.Delay(%d, %v) = %s, want %s", tc.p, tc.retry, tc.random, got, tc.want)
		}
	}
}

// TestBackoffSpec: a spec's fields left out take the defaults, and a bad one is refused with an
// error that names it.
func TestBackoffSpec(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	got, err := BackoffSpec{}.Policy()
	if want := (BackoffPolicy{Base: DefaultBackoffBase, Factor: 2, Max: DefaultBackoffMax, Jitter: 0.5}); err != nil || got != want {
		t.Errorf("empty spec: %+v, %v; want the defaults %+v", got, err, want)
	}
	got, err = BackoffSpec{Base: "1h"}.Policy()
	if err != nil || got.Max != time.Hour {
		t.Errorf("base over the default max: %+v, %v; want max = base", got, err)
	}
	got, err = BackoffSpec{Base: "2s", Factor: f(3), Max: "1m", Jitter: f(0)}.Policy()
	if want := (BackoffPolicy{Base: 2 * time.Second, Factor: 3, Max: time.Minute}); err != nil || got != want {
		t.Errorf("full spec: %+v, %v; want %+v", got, err, want)
	}
	if back, err := got.Spec().Policy(); err != nil || back != got {
		t.Errorf("Spec round trip: %+v, %v; want %+v", back, err, got)
	}
	for _, tc := range []struct {
		spec BackoffSpec
		says string
	}{
		{BackoffSpec{Base: "soon"}, `backoff base "soon"`},
		{BackoffSpec{Base: "0s"}, "backoff base must be positive"},
		{BackoffSpec{Base: "1m", Max: "1s"}, "backoff max"},
		{BackoffSpec{Max: "9000h"}, "backoff max"},
		{BackoffSpec{Factor: f(0)}, "backoff factor"},
		{BackoffSpec{Factor: f(11)}, "backoff factor"},
		{BackoffSpec{Jitter: f(-0.1)}, "backoff jitter"},
		{BackoffSpec{Jitter: f(1.5)}, "backoff jitter"},
	} {
		if _, err := tc.spec.Policy(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want an error saying %q", tc.spec, err, tc.says)
		}
	}
	bad := Lambda{Name: "l", Backoff: &BackoffPolicy{Base: time.Second, Factor: 0.5, Max: time.Minute}}.WithDefaults()
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "lambda l: backoff factor") {
		t.Errorf("lambda with a bad backoff: %v, want ErrInvalid naming the lambda and the field", err)
	}
}
