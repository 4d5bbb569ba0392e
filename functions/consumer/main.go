// Command consumer is the consumer function: EventBridge invokes it every minute, and it sweeps
// the store about every second for the minute (consumerfn.Deployed).
package main

import (
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
)

func main() {
	env, clients, logger := awsfn.Setup()
	// Schedules fire through the API's schedule path, which sends a task due soon to its queue.
	firings := frontend.New(clients.Store, frontend.Config{Lambdas: env.Lambdas, Task: env.Task, Queue: clients.Queue, Logger: logger})
	c := consumer.New(clients.Store, clients.Queue, consumer.Config{Lambdas: env.Lambdas, Task: env.Task, Logger: logger, Scheduler: firings})
	awsfn.Start(consumerfn.New(c, consumerfn.Deployed(logger)).Handle)
}
