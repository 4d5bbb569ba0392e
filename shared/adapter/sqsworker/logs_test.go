package sqsworker_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/task"
)

// TestAttemptNamesItsLogs: with the function's log group set, each attempt a batch runs names
// where its logs are: that group, the function's log stream (its Worker) and the invocation's
// request id; without it, none.
func TestAttemptNamesItsLogs(t *testing.T) {
	t.Parallel()
	const stream = "2026/11/28/[$LATEST]0123456789abcdef"
	for _, group := range []string{"/aws/lambda/atf-worker-echo", ""} {
		e := newEnv(t)
		e.put(t, "t1", `{"n":1}`, 0, false)
		h := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Worker: stream, LogGroup: group})
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "8f5c2c3e-req"})
		resp, err := h.Handle(ctx, event("t1"))
		must(t, err)
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("group %q: the record failed: %+v", group, resp)
		}
		hist, err := e.store.Attempts(ctx, echo.Name, "t1")
		must(t, err)
		var want *task.LogLocation
		if group != "" {
			want = &task.LogLocation{Group: group, Stream: stream, RequestID: "8f5c2c3e-req"}
		}
		if len(hist.Attempts) != 1 || hist.Attempts[0].Worker != stream || !reflect.DeepEqual(hist.Attempts[0].LogLocation, want) {
			t.Errorf("group %q: history %+v; want one attempt by %s with its logs at %+v", group, hist.Attempts, stream, want)
		}
	}
}
