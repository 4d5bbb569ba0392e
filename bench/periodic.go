package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// PeriodicRun is how late periodic schedules' firings run on the embedded stack, as atf dev
// wires it: each firing's task id names its fire time, and its run is timed against that.
type PeriodicRun struct {
	Schedules  int `json:"schedules"` // rate(1s) each, created at once
	Firings    int `json:"firings"`   // tasks that ran
	Duplicates int `json:"duplicates"`
	// Lateness is a firing's start in its handler − its fire time.
	Lateness Latency `json:"lateness_ms"`
}

// embeddedPeriodic runs n rate(1s) schedules for d, then pauses them and waits for what they
// fired to run.
func embeddedPeriodic(ctx context.Context, n int, d time.Duration, concurrency int) (PeriodicRun, error) {
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		late []time.Duration
	)
	e, err := startEmbedded(ctx, concurrency, func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		started := time.Now()
		_, stamp, _ := strings.Cut(tk.ID, ":")
		stamp, _, _ = strings.Cut(stamp, ".") // the incarnation's tag
		fire, err := time.Parse("20060102T150405Z", stamp)
		mu.Lock()
		defer mu.Unlock()
		runs[tk.ID]++
		if err == nil && runs[tk.ID] == 1 {
			late = append(late, started.Sub(fire))
		}
		return nil, nil
	})
	if err != nil {
		return PeriodicRun{}, err
	}
	defer e.stop()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%04d", i)
		if _, _, err := e.client.CreateSchedule(ctx, lambdaName, task.ScheduleSpec{ID: ids[i], Rate: "1s"}); err != nil {
			return PeriodicRun{}, fmt.Errorf("create schedule: %w", err)
		}
	}
	time.Sleep(d)
	for _, id := range ids {
		if _, err := e.client.PauseSchedule(ctx, lambdaName, id); err != nil {
			return PeriodicRun{}, fmt.Errorf("pause schedule: %w", err)
		}
	}
	time.Sleep(2 * time.Second) // what was sent ahead before the pause runs
	mu.Lock()
	defer mu.Unlock()
	r := PeriodicRun{Schedules: n, Firings: len(runs), Lateness: Summarise(late)}
	for _, c := range runs {
		r.Duplicates += c - 1
	}
	return r, nil
}
