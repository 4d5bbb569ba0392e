// Command sleep is an example lambda that takes its time: payload {"seconds": N} (default 1).
// It stops early when its context ends, as every handler should.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() {
	workerfn.Main(worker.HandlerFunc(func(ctx context.Context, t worker.Task) (json.RawMessage, error) {
		in := struct {
			Seconds float64 `json:"seconds"`
		}{Seconds: 1}
		if len(t.Payload) > 0 {
			if err := json.Unmarshal(t.Payload, &in); err != nil {
				return nil, worker.Fatal(fmt.Errorf("payload must be {\"seconds\": N}: %w", err))
			}
		}
		select {
		case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
			return json.Marshal(map[string]float64{"slept_seconds": in.Seconds})
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}))
}
