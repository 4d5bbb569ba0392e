// Command echo is an example lambda: its result is its payload. Build it and put the binary in
// an `atf dev --handlers` folder; `make run` does.
package main

import (
	"context"
	"encoding/json"

	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() {
	workerfn.Main(worker.HandlerFunc(func(ctx context.Context, t worker.Task) (json.RawMessage, error) {
		return t.Payload, nil
	}))
}
