// Command flaky is an example lambda that fails retriably on its first attempts, then succeeds:
// payload {"failures": N} (default 2). Any error that does not wrap worker.ErrFatal is retried.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() {
	workerfn.Main(worker.HandlerFunc(func(ctx context.Context, t worker.Task) (json.RawMessage, error) {
		in := struct {
			Failures int `json:"failures"`
		}{Failures: 2}
		if len(t.Payload) > 0 {
			if err := json.Unmarshal(t.Payload, &in); err != nil {
				return nil, worker.Fatal(fmt.Errorf("payload must be {\"failures\": N}: %w", err))
			}
		}
		if t.Attempt <= in.Failures {
			return nil, fmt.Errorf("attempt %d of the %d that fail on purpose", t.Attempt, in.Failures)
		}
		return json.Marshal(map[string]int{"succeeded_on_attempt": t.Attempt})
	}))
}
