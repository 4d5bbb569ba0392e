package local_test

// The acceptance test of redrive (issue 14): 100 tasks fail for good, 50 fatally and 50 until
// dead; redriven, they all succeed in their second life, and the counts match. On the embedded
// store and on DynamoDB and SQS.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

func TestRedriveDead(t *testing.T)    { testRedriveDead(t, embedded(t)) }
func TestRedriveDeadAWS(t *testing.T) { testRedriveDead(t, emulated(t, "rd")) }

func testRedriveDead(t *testing.T, b backend) {
	const n = 100
	ctx := t.Context()
	// Until healed, a task fails as its payload says: fatally, or retriably until it is dead. A
	// payload that says it is fixed succeeds at once. The result is the payload, to show which
	// payload the second life ran with.
	var healed atomic.Bool
	var runs atomic.Int64
	handler := worker.HandlerFunc(func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		runs.Add(1)
		var p struct {
			Fail  string
			Fixed bool
		}
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Fatal(err)
		}
		switch {
		case p.Fixed || healed.Load():
			return tk.Payload, nil
		case p.Fail == "fatal":
			return nil, worker.Fatal(fmt.Errorf("%s fails fatally, as asked", tk.ID))
		}
		return nil, fmt.Errorf("%s fails, to be retried", tk.ID)
	})
	c := flowStack(t, b, map[string]worker.Handler{"rd": handler})

	// Half fatal, half dead after 2 attempts; collection b's payloads are large (an item of
	// their own on DynamoDB, with a TTL once the task ends).
	pad := strings.Repeat("x", 1000)
	var reqs []client.ScheduleRequest
	for i := range n {
		fail, coll, payload := "fatal", "a", ""
		if i%2 == 1 {
			fail = "retry"
		}
		if i >= n/2 {
			coll, payload = "b", pad
		}
		body, _ := json.Marshal(map[string]string{"fail": fail, "pad": payload})
		reqs = append(reqs, client.ScheduleRequest{ID: fmt.Sprintf("rd-%03d", i), Payload: body, Collection: coll, MaxAttempts: 2})
	}
	if _, _, err := c.ScheduleBatch(ctx, "rd", reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		tk := waitEnded(t, c, task.Ref{Lambda: "rd", ID: r.ID}, flowTimeout(b, n))
		var p struct{ Fail string }
		_ = json.Unmarshal(r.Payload, &p)
		want := task.StatusDead
		if p.Fail == "fatal" {
			want = task.StatusFatalFailure
		}
		if tk.Status != want {
			t.Fatalf("%s ended %s in its first life, want %s", r.ID, tk.Status, want)
		}
	}

	// The dead letters, listed: both statuses, then one collection.
	failed, next, err := c.ListUpTo(ctx, task.ListParams{Lambda: "rd", Statuses: task.Failed, Limit: n + 1}, 50)
	if err != nil || next != "" || len(failed) != n {
		t.Fatalf("failed tasks listed: %d, next %q, %v; want %d", len(failed), next, err, n)
	}
	inA, _, err := c.ListUpTo(ctx, task.ListParams{Lambda: "rd", Statuses: task.Failed, Collection: "a", Limit: n + 1}, 50)
	if err != nil || len(inA) != n/2 {
		t.Fatalf("failed tasks of collection a: %d, %v; want %d", len(inA), err, n/2)
	}
	firstRuns := runs.Load()

	// Collection a is redriven with a payload that says it is fixed, in pages of 7; then the rest
	// with their own payloads, once the handler is healed.
	var progress []int
	ra, err := c.RedriveAll(ctx, task.ListParams{Lambda: "rd", Collection: "a", Limit: 7}, task.RedriveOptions{Payload: json.RawMessage(`{"fixed":true}`)}, func(r task.RedriveResult) {
		progress = append(progress, r.Redriven)
	})
	if err != nil || ra.Redriven != n/2 || ra.Skipped != 0 {
		t.Fatalf("redrive of collection a: %s, %v; want %d redriven", ra, err, n/2)
	}
	if len(progress) < n/2/7 || progress[len(progress)-1] != n/2 {
		t.Errorf("progress of collection a's redrive: %v", progress)
	}
	healed.Store(true)
	rb, err := c.RedriveAll(ctx, task.ListParams{Lambda: "rd"}, task.RedriveOptions{MaxAttempts: 3}, nil)
	if err != nil || rb.Redriven != n/2 || rb.Skipped != 0 {
		t.Fatalf("redrive of the rest: %s, %v; want %d redriven", rb, err, n/2)
	}

	for i, r := range reqs {
		tk := waitEnded(t, c, task.Ref{Lambda: "rd", ID: r.ID}, flowTimeout(b, n))
		want := string(r.Payload)
		if i < n/2 {
			want = `{"fixed":true}`
		}
		if tk.Status != task.StatusSuccess || tk.Attempts != 1 || string(tk.Result) != want {
			t.Fatalf("%s ended %s after %d attempts with %.60s, want success after 1 with %.60s", r.ID, tk.Status, tk.Attempts, tk.Result, want)
		}
		if i >= n/2 && tk.MaxAttempts != 3 {
			t.Errorf("%s: max_attempts %d, want the redrive's 3", r.ID, tk.MaxAttempts)
		}
	}
	if second := runs.Load() - firstRuns; second < n {
		t.Errorf("second lives ran %d times, want at least %d", second, n)
	}
	// Nothing is left to redrive, and the counts agree.
	if r, err := c.RedrivePage(ctx, task.ListParams{Lambda: "rd"}, task.RedriveOptions{}); err != nil || r.Redriven != 0 {
		t.Errorf("a redrive after all succeeded: %s, %v", r, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ls, err := c.Lambdas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var counts map[task.Status]int
		for _, l := range ls {
			if l.Name == "rd" {
				counts = l.Counts
			}
		}
		if counts[task.StatusSuccess] == n && len(counts) == 1 {
			break
		}
		if time.Now().After(deadline) { // DynamoDB's counters are written after the transition
			t.Fatalf("counts %v, want %d success and nothing else", counts, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
