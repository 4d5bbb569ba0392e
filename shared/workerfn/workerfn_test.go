package workerfn_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/adapter/eventsource"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/worker"
)

// TestFunctions runs one task through the function handlers on DynamoDB and SQS (the emulators
// in `make test`): an API Gateway event schedules it, the consumer function sends it to its
// queue, an SQS event source mapping hands it to the worker function, which claims it through
// the status function, runs it and reports success.
func TestFunctions(t *testing.T) {
	ctx := t.Context()
	quiet := slog.New(slog.DiscardHandler)
	echo := task.Lambda{Name: "echo", Concurrency: 2, Timeout: 5 * time.Second}.WithDefaults()
	b := awstest.NewBackend(t, "atf-fn", echo)
	store, queue, sqsClient, name := b.Store, b.Queue, b.SQS, b.Name
	cfg := task.Config{HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 1200 * time.Millisecond}.WithDefaults()

	// The API function schedules the task from the sample event.
	var req events.APIGatewayProxyRequest
	raw, err := os.ReadFile("../../events/api/schedule.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	req.Body = `{"id": "fn-1", "payload": {"hello": "functions"}}` // due now, not in 90s
	api := apifn.New(httpapi.New(frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{echo}, Task: cfg}), quiet), quiet)
	resp, err := api.Handle(ctx, req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("API: %d %s, %v", resp.StatusCode, resp.Body, err)
	}

	// The consumer function sends it to its queue within its (short) invocation.
	sweeps := consumer.New(store, queue, consumer.Config{Lambdas: task.FixedCatalog{echo}, Task: cfg, Logger: quiet})
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = consumerfn.New(sweeps, consumerfn.Config{Logger: quiet}).Handle(cctx, events.EventBridgeEvent{DetailType: "Scheduled Event", Time: time.Now()})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Get(ctx, "echo", "fn-1"); got.Status != task.StatusEnqueued {
		t.Fatalf("after the consumer: %s, want enqueued", got.Status)
	}

	// The worker function, fed by the queue, claims through the status function and runs it.
	hsc := statusfn.NewClient(statusfn.LocalInvoker{Handler: statusfn.NewHandler(status.New(store, status.Config{Task: cfg, Logger: quiet}), quiet)})
	fn, err := sqsworker.New(sqsworker.Config{
		Lambda: echo, Status: hsc, Task: cfg, Margin: time.Second, Logger: quiet,
		Handler: worker.HandlerFunc(func(ctx context.Context, t worker.Task) (json.RawMessage, error) { return t.Payload, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	qname, _ := sqsqueue.QueueName(name, "echo", echo.DefaultPriority())
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go eventsource.SQS{Client: sqsClient, Queue: qname, Handler: fn.Handle, Timeout: echo.Timeout + time.Second, Logger: quiet}.Run(mctx)

	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := store.Get(ctx, "echo", "fn-1")
		if err == nil && got.Status == task.StatusSuccess {
			if string(got.Result) != `{"hello":"functions"}` || got.Attempts != 1 {
				t.Errorf("result %s after %d attempts, want the payload after 1", got.Result, got.Attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task is %s (%v), want success", got.Status, err)
		}
	}
}
