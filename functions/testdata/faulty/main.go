// Command faulty is a test-only Lambda function, never built by make build nor deployed: the
// tests of functions/ build it as they build the real ones, to see the Lambda Runtime API harness
// report a handler that panics or outlives its deadline. Its event says what to do:
// {"do": "panic"} panics, {"do": "hang"} sleeps past any deadline, anything else is its answer.
package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
)

func main() {
	awsfn.Start(func(_ context.Context, event json.RawMessage) (json.RawMessage, error) {
		var in struct{ Do string }
		_ = json.Unmarshal(event, &in)
		switch in.Do {
		case "panic":
			panic("faulty: a panic on purpose")
		case "hang":
			time.Sleep(time.Hour) // ignores the deadline, as a stuck handler does
		}
		return event, nil
	})
}
