// Command consumer is the consumer function: EventBridge invokes it every minute, and it sweeps
// the store about every second for the minute (consumerfn.Deployed). With ATF_EVENT_BUS it publishes the
// lifecycle events of its writes (retried and dead on timeouts, dead past deadlines, dropped,
// unblocked, upstream_failed) as it goes, and flushes them before the invocation returns.
package main

import (
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/lifecycle"
)

func main() {
	env, clients, logger := awsfn.Setup()
	// Schedules fire through the API's schedule path, which sends a task due soon to its queue.
	firings := frontend.New(clients.TaskStore(), frontend.Config{Lambdas: clients.Catalog, Task: env.Task, Queue: clients.Queue, Logger: logger})
	c := consumer.New(clients.TaskStore(), clients.Queue, consumer.Config{Lambdas: clients.Catalog, Task: env.Task, Logger: logger, Scheduler: firings, Metrics: clients.Metrics})
	handler := consumerfn.New(c, consumerfn.Deployed(logger)).Handle
	awsfn.Start(lifecycle.FlushAfterErr(handler, clients.Events, env.EventsFlush), clients.Invoked)
}
