package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// WaitRun is the wait for a result: how soon a waiting GET answers after its task ended.
type WaitRun struct {
	Waiters     int `json:"waiters"` // one request each, on its own task, all at once
	Concurrency int `json:"concurrency"`
	Missing     int `json:"missing"` // waiters answered with a task that had not ended
	// Latency is answer − the task's updated_at when it ended: from the terminal transition's
	// clock reading, before its write committed, to the waiter's answer in hand.
	Latency Latency `json:"latency_ms"`
}

// embeddedWait measures waits for a result on the embedded stack, as atf dev wires it: n tasks
// are scheduled behind a paused gate, n clients each wait for one (GET ?wait=25s, looping as
// client.Wait does), and once every wait is asleep the gate opens and the tasks run.
func embeddedWait(ctx context.Context, n, concurrency int) (WaitRun, error) {
	e, err := startEmbedded(ctx, concurrency, func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	if err != nil {
		return WaitRun{}, err
	}
	defer e.stop()
	if _, err := e.client.SetGate(ctx, lambdaName, "", task.GatePause); err != nil {
		return WaitRun{}, err
	}
	var ids []string
	reqs := make([]client.ScheduleRequest, batchSize)
	for left := n; left > 0; left -= batchSize {
		tasks, _, err := e.client.ScheduleBatch(ctx, lambdaName, reqs[:min(left, batchSize)])
		if err != nil {
			return WaitRun{}, fmt.Errorf("schedule: %w", err)
		}
		for _, t := range tasks {
			ids = append(ids, t.ID)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		first error
	)
	for _, id := range ids {
		wg.Go(func() {
			t, err := e.client.Wait(wctx, lambdaName, id)
			answered := time.Now()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				first = cmpErr(first, err)
			case t.Status.Terminal():
				lat = append(lat, answered.Sub(t.UpdatedAt))
			}
		})
	}
	err = waitUntil(wctx, 5*time.Millisecond, func() (bool, error) { return e.stack.Waiters() >= n, nil })
	if err == nil {
		_, err = e.client.SetGate(ctx, lambdaName, "", task.GateOpen)
	}
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err = cmpErr(err, first); err != nil {
		return WaitRun{}, err
	}
	return WaitRun{Waiters: n, Concurrency: concurrency, Missing: n - len(lat), Latency: Summarise(lat)}, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
