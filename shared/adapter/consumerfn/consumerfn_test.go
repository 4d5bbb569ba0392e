package consumerfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/service/consumer"
)

// clock is a fake clock that moves only when the handler waits.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }
func (c *clock) Wait(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

type sweeper struct {
	clock *clock
	at    []time.Time
	fail  func(n int) bool
}

func (s *sweeper) Sweep(context.Context) (consumer.Stats, error) {
	s.at = append(s.at, s.clock.now)
	s.clock.now = s.clock.now.Add(150 * time.Millisecond) // a sweep takes time too
	if s.fail != nil && s.fail(len(s.at)) {
		return consumer.Stats{}, errors.New("store unavailable")
	}
	return consumer.Stats{Enqueued: 1}, nil
}

func scheduled(t *testing.T) events.EventBridgeEvent {
	t.Helper()
	raw, err := os.ReadFile("../../../events/eventbridge/scheduled.json")
	if err != nil {
		t.Fatal(err)
	}
	var e events.EventBridgeEvent
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if e.Time.IsZero() || e.DetailType != "Scheduled Event" {
		t.Fatalf("sample event: time %v, detail type %q", e.Time, e.DetailType)
	}
	return e
}

func run(t *testing.T, e events.EventBridgeEvent, start time.Time, deadline time.Duration, fail func(int) bool) (*sweeper, error) {
	t.Helper()
	c := &clock{now: start}
	s := &sweeper{clock: c, fail: fail}
	h := consumerfn.New(s, consumerfn.Config{Now: c.Now, Wait: c.Wait, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	if deadline > 0 {
		ctx = deadlineAt{ctx, start.Add(deadline)}
	}
	return s, h.Handle(ctx, e)
}

// deadlineAt reports a deadline on the fake clock's time line; it never expires for real.
type deadlineAt struct {
	context.Context
	at time.Time
}

func (d deadlineAt) Deadline() (time.Time, bool) { return d.at, true }

// TestSweepsEverySecond: an invocation on time sweeps about every second until two seconds
// before its minute ends.
func TestSweepsEverySecond(t *testing.T) {
	e := scheduled(t)
	s, err := run(t, e, e.Time.Add(300*time.Millisecond), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.at); n < 55 || n > 58 {
		t.Fatalf("%d sweeps in the minute, want about one a second", n)
	}
	for i := 1; i < len(s.at); i++ {
		if gap := s.at[i].Sub(s.at[i-1]); gap != time.Second {
			t.Fatalf("sweep %d started %s after the one before, want 1s", i, gap)
		}
	}
	if last := s.at[len(s.at)-1]; last.After(e.Time.Add(time.Minute - consumerfn.DefaultMargin)) {
		t.Errorf("last sweep at %s, after the minute's margin", last.Sub(e.Time))
	}
}

// TestDeadline: the invocation's deadline, not the minute, ends a short invocation.
func TestDeadline(t *testing.T) {
	e := scheduled(t)
	s, err := run(t, e, e.Time, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := s.at[len(s.at)-1]
	if len(s.at) < 7 || last.After(e.Time.Add(10*time.Second-consumerfn.DefaultMargin)) {
		t.Errorf("%d sweeps, the last at +%s; want about 8, ending 2s before the 10s deadline", len(s.at), last.Sub(e.Time))
	}
}

// TestLate: an invocation that starts late gets what is left of its minute, at least one sweep.
func TestLate(t *testing.T) {
	e := scheduled(t)
	s, err := run(t, e, e.Time.Add(50*time.Second), 0, nil)
	if err != nil || len(s.at) < 7 || len(s.at) > 9 {
		t.Errorf("50s late: %d sweeps, %v; want about 8", len(s.at), err)
	}
	s, err = run(t, e, e.Time.Add(5*time.Minute), 0, nil)
	if err != nil || len(s.at) != 1 {
		t.Errorf("minutes late: %d sweeps, %v; want 1", len(s.at), err)
	}
}

// TestErrors: failed sweeps are retried at the next tick; the invocation fails only if all did.
func TestErrors(t *testing.T) {
	e := scheduled(t)
	s, err := run(t, e, e.Time, 10*time.Second, func(n int) bool { return n%2 == 1 })
	if err != nil || len(s.at) < 7 {
		t.Errorf("half the sweeps failing: %d sweeps, %v; want them all tried and no error", len(s.at), err)
	}
	if _, err := run(t, e, e.Time, 10*time.Second, func(int) bool { return true }); err == nil {
		t.Error("every sweep failing: got no error")
	}
}

// runner is a consumer that runs each lambda on its own schedule (consumerfn.Runner).
type runner struct {
	sweeper
	got consumer.RunParams
	rs  consumer.RunStats
}

func (r *runner) Run(_ context.Context, p consumer.RunParams) consumer.RunStats {
	r.got = p
	return r.rs
}

// TestRunner: a consumer that can sweep its lambdas apart is run for the invocation, until the
// margin before its deadline, at the handler's interval; the invocation fails only if every
// pass did.
func TestRunner(t *testing.T) {
	e := scheduled(t)
	c := &clock{now: e.Time}
	r := &runner{rs: consumer.RunStats{Passes: 8, Failed: 7, Err: errors.New("store unavailable")}}
	h := consumerfn.New(r, consumerfn.Config{Now: c.Now, Wait: c.Wait, Logger: slog.New(slog.DiscardHandler)})
	ctx := deadlineAt{t.Context(), e.Time.Add(10 * time.Second)}
	if err := h.Handle(ctx, e); err != nil {
		t.Errorf("one pass of 8 succeeded: %v", err)
	}
	if want := e.Time.Add(10*time.Second - consumerfn.DefaultMargin); !r.got.Until.Equal(want) || r.got.Interval != consumerfn.DefaultInterval {
		t.Errorf("run %+v, want until %s every %s", r.got, want, consumerfn.DefaultInterval)
	}
	if len(r.at) != 0 {
		t.Errorf("%d sweeps of every lambda besides the run", len(r.at))
	}
	r.rs.Failed = 8
	if err := h.Handle(ctx, e); err == nil {
		t.Error("every pass failed: got no error")
	}
}

// TestStopWhenIdle: the configuration reaches the run, which then ends as soon as nothing is due
// before the invocation's minute is up.
func TestStopWhenIdle(t *testing.T) {
	e := scheduled(t)
	c := &clock{now: e.Time}
	for _, stop := range []bool{false, true} {
		r := &runner{rs: consumer.RunStats{Passes: 1}}
		h := consumerfn.New(r, consumerfn.Config{Now: c.Now, Wait: c.Wait, Logger: slog.New(slog.DiscardHandler), StopWhenIdle: stop})
		if err := h.Handle(t.Context(), e); err != nil {
			t.Fatal(err)
		}
		if r.got.StopWhenIdle != stop || r.got.Until.IsZero() {
			t.Errorf("StopWhenIdle %v: run %+v", stop, r.got)
		}
	}
}
