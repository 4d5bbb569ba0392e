package local

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

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
)

// Functions makes the stack run the AWS function handlers, fed the way AWS feeds them, instead
// of the in-process services: the API function behind the HTTP listener, the consumer function
// on a one-minute schedule, and for each queue an SQS event source mapping feeding the lambda's
// worker function, which claims through the status function. It needs Store and Queue on
// DynamoDB and SQS.
type Functions struct {
	SQS         *sqs.Client
	QueuePrefix string
}

// startFunctions wires the function handlers on c.Store and c.Queue.
func (s *Stack) startFunctions(c Config, lambdas []task.Lambda) error {
	quit, stop := context.WithCancel(context.Background())
	abort, cut := context.WithCancel(context.Background())
	s.stopLoops, s.abortLoops = stop, cut

	// As the worker function does, hide a record whose claim failed for seconds, not the
	// queue's visibility timeout of minutes.
	visibility, _ := c.Queue.(sqsworker.Visibility)
	hsc := statusfn.NewClient(statusfn.LocalInvoker{Handler: statusfn.NewHandler(status.New(c.Store, status.Config{Task: c.Task, Logger: c.Logger, Queue: c.aheadQueue(c.Queue), Lambdas: task.FixedCatalog(lambdas)}), c.Logger)})
	for _, l := range lambdas {
		h, _ := c.Mux.Handler(l.Name)
		fn, err := sqsworker.New(sqsworker.Config{Lambda: l, Handler: h, Status: hsc, Queue: visibility, Task: c.Task, Metrics: s.metrics, Logger: c.Logger})
		if err != nil {
			return err
		}
		// The stack gives a worker function the lambda's timeout plus the margin.
		timeout := l.Timeout + sqsworker.DefaultMargin
		for _, p := range l.Priorities {
			name, err := sqsqueue.QueueName(c.Functions.QueuePrefix, l.Name, p)
			if err != nil {
				return err
			}
			m := eventsource.SQS{Client: c.Functions.SQS, Queue: name, Handler: fn.Handle, BatchSize: min(10, l.Concurrency),
				Timeout: timeout, Abort: abort, Logger: c.Logger.With("lambda", l.Name, "priority", p)}
			s.loops.Go(func() {
				if err := m.Run(quit); err != nil && quit.Err() == nil {
					c.Logger.Error("event source stopped", "queue", name, "err", err)
				}
			})
		}
	}

	cons := consumer.New(c.Store, c.Queue, consumer.Config{Lambdas: task.FixedCatalog(lambdas), Task: c.Task, Logger: c.Logger, Scheduler: c.firings(c.Store, lambdas, c.Queue, nil), Metrics: s.metrics})
	sched := eventsource.Schedule{Period: consumerfn.Period, Timeout: consumerfn.Period, Logger: c.Logger,
		Handler: consumerfn.New(cons, consumerfn.Config{Logger: c.Logger}).Handle}
	s.loops.Go(func() { _ = sched.Run(quit) })

	api := apifn.New(httpapi.New(frontend.New(c.Store, frontend.Config{Lambdas: task.FixedCatalog(lambdas), Task: c.Task, Queue: c.aheadQueue(c.Queue), SendFirst: true, Logger: c.Logger, Feed: s.feed}), c.Logger), c.Logger)
	return s.serve(c, api)
}

// stopFunctions stops the event sources; invocations in flight may finish until ctx is done,
// and are then cut short: their handlers stop and their tasks are released.
func (s *Stack) stopFunctions(ctx context.Context) {
	s.stopLoops()
	done := make(chan struct{})
	go func() { s.loops.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.abortLoops()
		<-done
	}
	s.abortLoops()
}
