package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testSnooze: a run its handler snoozed (task.Snooze) is written as a new task due at its wake
// time, its attempt given back and its snoozes counted, which every read a transition may start
// from reads back (Get, GetState, GetMany, Due's lane of new tasks), so that task.MaxSnoozes holds
// across runs; the history keeps the run as snoozed. A retry after the handler's delay
// (task.RetryAfter) is due then, not after the backoff, and its attempt counts.
func testSnooze(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	update := func(next task.Task, prev int64) error { return s.Update(t.Context(), next, prev) }
	tk := plain(l, "t", now)
	create(t, s, tk)

	snoozed := runAttempt(t, s, tk, now, attemptRun{"worker-a", time.Second, func(r task.Task, at time.Time) (task.Task, error) {
		return task.Snooze(r, "lease", time.Minute, at)
	}, nil}, update)
	mustEqual(t, s, snoozed)
	wake := now.Add(time.Second + time.Minute)
	if snoozed.Status != task.StatusNew || snoozed.Attempts != 0 || snoozed.Snoozes != 1 || !snoozed.NextTriggerAt.Equal(wake) {
		t.Fatalf("snoozed: %s, %d attempts, %d snoozes, due %v; want new, 0, 1, due %v", snoozed.Status, snoozed.Attempts, snoozed.Snoozes, snoozed.NextTriggerAt, wake)
	}
	if r, ok := s.(task.StateReader); ok {
		got, err := r.GetState(t.Context(), l, "t")
		if err != nil || got.Snoozes != 1 {
			t.Errorf("GetState: %d snoozes, err %v; want 1", got.Snoozes, err)
		}
	}
	many, err := s.GetMany(t.Context(), []task.Ref{{Lambda: l, ID: "t"}})
	if err != nil || len(many) != 1 || many[0].Snoozes != 1 {
		t.Errorf("GetMany: %+v, %v; want the task with 1 snooze", many, err)
	}
	newLane := task.DueParams{Lambda: l, Statuses: []task.Status{task.StatusNew}, Before: wake.Add(-time.Millisecond)}
	if due, err := s.Due(t.Context(), newLane); err != nil || len(due) != 0 {
		t.Errorf("Due before its wake time: %v, %v; want none", ids(due), err)
	}
	newLane.Before = wake
	due, err := s.Due(t.Context(), newLane)
	if err != nil || len(due) != 1 || due[0].Snoozes != 1 {
		t.Fatalf("Due at its wake time: %+v, %v; want the task with 1 snooze", due, err)
	}

	retry := wake.Add(2*time.Second + 10*time.Minute)
	retried := runAttempt(t, s, due[0], wake, attemptRun{"worker-b", 2 * time.Second, func(r task.Task, at time.Time) (task.Task, error) {
		return task.RetryAfter(r, "lease", "rate limited", 10*time.Minute, at)
	}, nil}, update)
	mustEqual(t, s, retried)
	if retried.Status != task.StatusRetriableFailure || retried.Attempts != 1 || retried.Snoozes != 1 || !retried.NextTriggerAt.Equal(retry) {
		t.Fatalf("retried: %s, %d attempts, %d snoozes, due %v; want retriable_failure, 1, 1, due %v", retried.Status, retried.Attempts, retried.Snoozes, retried.NextTriggerAt, retry)
	}
	retryLane := task.DueParams{Lambda: l, Statuses: []task.Status{task.StatusRetriableFailure}, Before: retry}
	if due, err := s.Due(t.Context(), retryLane); err != nil || len(due) != 1 {
		t.Errorf("Due at the handler's retry time: %v, %v; want the task", ids(due), err)
	}

	checkHistory(t, s, l, "t", task.History{Attempts: []task.Attempt{
		{Number: 1, StartedAt: now, EndedAt: now.Add(time.Second), Outcome: task.OutcomeSnoozed, Error: "snoozed for 1m0s by its handler", Worker: "worker-a"},
		{Number: 2, StartedAt: wake, EndedAt: wake.Add(2 * time.Second), Outcome: task.OutcomeRetriable, Error: "rate limited", Worker: "worker-b"},
	}})
}
