package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/ecsexecutor"
	"github.com/openatf/atf/shared/task"
)

// TestLogs: on ECS the executor's attempts name its log group and stream, which it reads from the
// task metadata endpoint, and its worker is that stream; its handler's standard error is in its
// own log, a JSON line for each line, naming the task.
func TestLogs(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	want := &task.LogLocation{Group: "atf-test-ExecutorNapLogs", Stream: "nap/executor/cd189a933e5849daa93386466019ab50"}
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"Name":"executor","LogDriver":"awslogs","LogOptions":{"awslogs-group":"`+want.Group+
			`","awslogs-region":"us-east-1","awslogs-stream":"`+want.Stream+`"}}`)
	}))
	defer md.Close()
	dir := handlersDir(t, map[string]string{"nap.sh": `cat >/dev/null; echo "napping $ATF_TASK_ID" >&2; echo '{"slept":true}'`})
	ids := s.schedule(t, 2, "0")
	exe := s.startExecutor(t, dir, 10*time.Second, ecsexecutor.EnvMetadata+"="+md.URL+"/v4/abc")
	waitFor(t, "both tasks to succeed", 60*time.Second, func() bool {
		return len(withStatus(s.tasks(t, ids), task.StatusSuccess)) == len(ids)
	})
	exe.terminate(t, 25*time.Second)

	logged := map[string]bool{} // task ids whose handler output the executor logged
	for _, line := range exe.lines() {
		var rec struct {
			Msg, Line string
			TaskID    string `json:"task_id"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "handler output" && rec.Line == "napping "+rec.TaskID {
			logged[rec.TaskID] = true
		}
	}
	for _, id := range ids {
		h, err := s.store.Attempts(context.Background(), s.lambda.Name, id)
		if err != nil || len(h.Attempts) != 1 {
			t.Fatalf("%s: history %+v, %v; want one attempt", id, h, err)
		}
		if a := h.Attempts[0]; !reflect.DeepEqual(a.LogLocation, want) || a.Worker != want.Stream {
			t.Errorf("%s: attempt's log location %+v, worker %q; want %+v, and the stream", id, a.LogLocation, a.Worker, want)
		}
		if !logged[id] {
			t.Errorf("%s: the executor did not log its handler's output", id)
		}
	}
}
