package main

import (
	"encoding/json"
	"testing"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestJoin: the result maps each upstream to its result, or to its status and error when it did
// not succeed; a task without upstreams gets {}.
func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		inputs []task.Input
		want   string
	}{
		{nil, `{}`},
		{[]task.Input{
			{Lambda: "echo", ID: "b", Status: task.StatusSuccess, Result: json.RawMessage(`{"text":"b"}`)},
			{Lambda: "other", ID: "b", Status: task.StatusSuccess, Result: json.RawMessage(`null`)},
			{Lambda: "echo", ID: "c", Status: task.StatusFatalFailure, Error: "boom"},
		}, `{"echo/b":{"text":"b"},"echo/c":{"error":"boom","status":"fatal_failure"},"other/b":null}`},
	} {
		got, err := join(t.Context(), worker.Task{ID: "d", Inputs: tc.inputs})
		if err != nil || string(got) != tc.want {
			t.Errorf("join(%v) = %s, %v; want %s", tc.inputs, got, err, tc.want)
		}
	}
}
