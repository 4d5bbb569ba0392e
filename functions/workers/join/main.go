// Command join is an example lambda of task flows: it gathers the results of the tasks it waited
// for (its after) into one object, by "lambda/id": {"echo/b": <b's result>, "echo/c": <c's
// result>}. Under the trigger rule all_done an upstream that did not succeed comes as
// {"status": ..., "error": ...} instead. Build it and put the binary in an `atf dev --handlers`
// folder; `make run` does.
package main

import (
	"context"
	"encoding/json"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() { workerfn.Main(worker.HandlerFunc(join)) }

func join(_ context.Context, t worker.Task) (json.RawMessage, error) {
	out := make(map[string]any, len(t.Inputs))
	for _, in := range t.Inputs {
		key := in.Lambda + "/" + in.ID
		if in.Status == task.StatusSuccess {
			out[key] = in.Result
		} else {
			out[key] = map[string]any{"status": in.Status, "error": in.Error}
		}
	}
	return json.Marshal(out)
}
