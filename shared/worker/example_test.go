package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openatf/atf/shared/worker"
)

// A handler that waits for something outside snoozes, spending no attempt; one told when to come
// back (a 429 with Retry-After) retries then, its attempt counted.
func ExampleSnooze() {
	h := worker.HandlerFunc(func(_ context.Context, t worker.Task) (json.RawMessage, error) {
		var p struct{ Ready, RateLimited bool }
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, worker.Fatal(err)
		}
		switch {
		case !p.Ready:
			return nil, worker.Snooze(time.Minute)
		case p.RateLimited:
			return nil, worker.RetryAfter(30*time.Second, errors.New("upstream answered 429"))
		}
		return json.RawMessage(`{"done":true}`), nil
	})
	for _, payload := range []string{`{"Ready": false}`, `{"Ready": true, "RateLimited": true}`} {
		_, err := h.Handle(context.Background(), worker.Task{Attempt: 1, Payload: json.RawMessage(payload)})
		later, _ := worker.LaterOf(err)
		fmt.Printf("%v: again after %s, attempt counted: %v\n", err, later.Delay, later.Counted)
	}
	// Output:
	// snoozed for 1m0s: again after 1m0s, attempt counted: false
	// upstream answered 429: again after 30s, attempt counted: true
}
