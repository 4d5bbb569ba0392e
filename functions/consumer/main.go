// Command consumer is the consumer function: EventBridge invokes it every minute, and it sweeps
// the store about every second for the minute (consumerfn.Deployed).
package main

import (
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/service/consumer"
)

func main() {
	env, clients, logger := awsfn.Setup()
	c := consumer.New(clients.Store, clients.Queue, consumer.Config{Lambdas: env.Lambdas, Task: env.Task, Logger: logger})
	awsfn.Start(consumerfn.New(c, consumerfn.Deployed(logger)).Handle)
}
