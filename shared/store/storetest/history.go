package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// attemptRun is one attempt to write: claimed by worker at start, with its logs at logs, ended
// by end at start + took.
type attemptRun struct {
	worker string
	took   time.Duration
	end    func(running task.Task, now time.Time) (task.Task, error)
	logs   *task.LogLocation
}

// runAttempt enqueues the due task t, claims it for run.worker at now and ends the attempt with
// run.end, each a write of its own (through write), and returns the task as last written.
func runAttempt(t *testing.T, s task.Store, tk task.Task, now time.Time, run attemptRun, write func(next task.Task, prev int64) error) task.Task {
	t.Helper()
	cfg := task.Config{}.WithDefaults()
	enq, err := task.Enqueue(tk, now, cfg)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	claimed, err := task.Claim(enq, "lease", now, cfg)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	claimed.Worker, claimed.LogLocation = run.worker, run.logs
	ended, err := run.end(claimed, now.Add(run.took))
	if err != nil {
		t.Fatalf("ending attempt %d: %v", claimed.AttemptSeq, err)
	}
	for _, w := range []struct{ next, prev task.Task }{{enq, tk}, {claimed, enq}, {ended, claimed}} {
		if err := write(w.next, w.prev.Version); err != nil {
			t.Fatalf("Update to %s: %v", w.next.Status, err)
		}
	}
	return ended
}

func failWith(msg string) func(task.Task, time.Time) (task.Task, error) {
	return func(r task.Task, now time.Time) (task.Task, error) {
		return task.Fail(r, "lease", msg, true, now, task.Config{}.WithDefaults(), 0)
	}
}

// testHistory: the attempts a task's transitions end are its history, oldest first, each with
// its number, times, outcome, error and worker, whichever way it ended (a failure, a timeout
// written through UpdateMany as the consumer writes it, a success), and a task that succeeded at
// once has that one attempt. A task that never ran has none; a missing task is not found.
func testHistory(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	update := func(next task.Task, prev int64) error { return s.Update(t.Context(), next, prev) }
	updateMany := func(next task.Task, prev int64) error {
		return task.UpdateMany(t.Context(), s, []task.Versioned{{Task: next, Prev: prev}})[0]
	}
	retried, once, waiting := plain(l, "retried", now), plain(l, "once", now), plain(l, "waiting", now)
	create(t, s, retried, once, waiting)

	tk := runAttempt(t, s, retried, now, attemptRun{"worker-a", 2 * time.Second, failWith("boom 1"), nil}, update)
	start2 := *tk.NextTriggerAt
	timeout := func(r task.Task, _ time.Time) (task.Task, error) {
		return task.Timeout(r, *r.NextTriggerAt, cfg, 0)
	}
	tk = runAttempt(t, s, tk, start2, attemptRun{"worker-b", 0, timeout, nil}, updateMany)
	start3 := *tk.NextTriggerAt
	succeed := func(r task.Task, now time.Time) (task.Task, error) {
		return task.Succeed(r, "lease", []byte(`{"ok":true}`), now, cfg)
	}
	runAttempt(t, s, tk, start3, attemptRun{"worker-c", 1500 * time.Millisecond, succeed, nil}, update)

	want := []task.Attempt{
		{Number: 1, StartedAt: now, EndedAt: now.Add(2 * time.Second), Outcome: task.OutcomeRetriable, Error: "boom 1", Worker: "worker-a"},
		{Number: 2, StartedAt: start2, EndedAt: start2.Add(cfg.HeartbeatTimeout), Outcome: task.OutcomeTimeout, Error: "no heartbeat within the heartbeat timeout; the worker was lost", Worker: "worker-b"},
		{Number: 3, StartedAt: start3, EndedAt: start3.Add(1500 * time.Millisecond), Outcome: task.OutcomeSuccess, Worker: "worker-c"},
	}
	checkHistory(t, s, l, "retried", task.History{Attempts: want})

	runAttempt(t, s, once, now, attemptRun{"worker-a", time.Second, succeed, nil}, update)
	checkHistory(t, s, l, "once", task.History{Attempts: []task.Attempt{
		{Number: 1, StartedAt: now, EndedAt: now.Add(time.Second), Outcome: task.OutcomeSuccess, Worker: "worker-a"},
	}})

	checkHistory(t, s, l, "waiting", task.History{Attempts: []task.Attempt{}})
	if _, err := s.Attempts(t.Context(), l, "missing"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Attempts of a missing task: %v, want ErrNotFound", err)
	}
}

// testHistoryBounded: a history keeps the latest task.MaxHistory attempts and counts the others;
// a redrive's next attempt goes on from the last number.
func testHistoryBounded(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	update := func(next task.Task, prev int64) error { return s.Update(t.Context(), next, prev) }
	tk := plain(l, "t", now)
	tk.MaxAttempts = task.MaxHistory + 1
	create(t, s, tk)
	at := now
	var want []task.Attempt
	for i := 1; i <= task.MaxHistory+1; i++ {
		msg := fmt.Sprintf("boom %d", i)
		tk = runAttempt(t, s, tk, at, attemptRun{"w", time.Second, failWith(msg), nil}, update)
		want = append(want, task.Attempt{Number: i, StartedAt: at, EndedAt: at.Add(time.Second), Outcome: task.OutcomeRetriable, Error: msg, Worker: "w"})
		if tk.NextTriggerAt != nil {
			at = *tk.NextTriggerAt
		}
	}
	if tk.Status != task.StatusDead {
		t.Fatalf("after %d failures the task is %s, want dead", task.MaxHistory+1, tk.Status)
	}
	checkHistory(t, s, l, "t", task.History{Attempts: want[1:], Dropped: 1})

	redriven, err := task.Redrive(tk, task.RedriveOptions{}, at.Add(time.Hour), cfg)
	if err != nil {
		t.Fatal(err)
	}
	redriven.Payload = nil
	if err := s.Redrive(t.Context(), redriven, tk.Version); err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	at = at.Add(time.Hour)
	runAttempt(t, s, redriven, at, attemptRun{"w2", time.Second, func(r task.Task, now time.Time) (task.Task, error) {
		return task.Fail(r, "lease", "fatal", false, now, cfg, 0)
	}, nil}, update)
	want = append(want, task.Attempt{Number: task.MaxHistory + 2, StartedAt: at, EndedAt: at.Add(time.Second), Outcome: task.OutcomeFatal, Error: "fatal", Worker: "w2"})
	checkHistory(t, s, l, "t", task.History{Attempts: want[2:], Dropped: 2})
}

// testHistoryLog: an attempt ended with a log (task.Task.Logged) keeps it in the history, a
// failure's as a success's, if the store keeps logs (KeepsLogs); one that does not keeps the
// attempts without their logs. Every store keeps where each attempt's logs are, as its claim
// named them (its stream the worker's name, as a worker function's, or another).
func testHistoryLog(t *testing.T, s task.Store, keepsLogs bool) {
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	update := func(next task.Task, prev int64) error { return s.Update(t.Context(), next, prev) }
	tk := plain(l, "logged", now)
	create(t, s, tk)
	failLog, successLog := "fetching page 1\nconnection reset\n", strings.Repeat("é", task.MaxLogBytes/2)+"processing Pat\n"
	locations := []*task.LogLocation{
		{Group: "/aws/lambda/worker-echo", Stream: "w", RequestID: "req-1"},
		{Group: "/ecs/executor-echo", Stream: "echo/executor/0a1b2c"},
	}
	logged := func(end func(r task.Task, now time.Time) (task.Task, error), log string) func(task.Task, time.Time) (task.Task, error) {
		return func(r task.Task, now time.Time) (task.Task, error) {
			next, err := end(r, now)
			return next.Logged(log), err
		}
	}
	tk = runAttempt(t, s, tk, now, attemptRun{"w", time.Second, logged(failWith("boom"), failLog), locations[0]}, update)
	start2 := *tk.NextTriggerAt
	runAttempt(t, s, tk, start2, attemptRun{"w", time.Second, logged(func(r task.Task, now time.Time) (task.Task, error) {
		return task.Succeed(r, "lease", nil, now, cfg)
	}, successLog), locations[1]}, update)

	wantLogs := []string{"", ""}
	if keepsLogs {
		wantLogs = []string{failLog, task.TailLog(successLog)}
	}
	checkHistory(t, s, l, "logged", task.History{Attempts: []task.Attempt{
		{Number: 1, StartedAt: now, EndedAt: now.Add(time.Second), Outcome: task.OutcomeRetriable, Error: "boom", Worker: "w", Log: wantLogs[0], LogLocation: locations[0]},
		{Number: 2, StartedAt: start2, EndedAt: start2.Add(time.Second), Outcome: task.OutcomeSuccess, Worker: "w", Log: wantLogs[1], LogLocation: locations[1]},
	}})
}

func checkHistory(t *testing.T, s task.Store, lambda, id string, want task.History) {
	t.Helper()
	got, err := s.Attempts(t.Context(), lambda, id)
	if err != nil {
		t.Fatalf("Attempts %s/%s: %v", lambda, id, err)
	}
	if got.Attempts == nil {
		t.Errorf("Attempts %s/%s: a nil list, want an empty one", lambda, id)
	}
	if got.Dropped != want.Dropped || len(got.Attempts) != len(want.Attempts) {
		t.Fatalf("Attempts %s/%s: %d attempts, %d dropped; want %d, %d:\n%+v", lambda, id, len(got.Attempts), got.Dropped, len(want.Attempts), want.Dropped, got.Attempts)
	}
	for i, w := range want.Attempts {
		g := got.Attempts[i]
		if g.Number != w.Number || !g.StartedAt.Equal(w.StartedAt) || !g.EndedAt.Equal(w.EndedAt) ||
			g.Outcome != w.Outcome || g.Error != w.Error || g.Worker != w.Worker || g.Log != w.Log ||
			!reflect.DeepEqual(g.LogLocation, w.LogLocation) {
			t.Errorf("attempt %d of %s/%s:\n  got  %+v\n  want %+v", i, lambda, id, g, w)
		}
	}
}
