// Command status is a status function: a lambda's workers invoke it to claim tasks, heartbeat and
// report results, over the contract of shared/adapter/statusfn. Each lambda of kind function has one of
// its own, named by ATF_LAMBDA (required), and it refuses requests naming any other lambda. With ATF_EVENT_BUS it publishes the lifecycle events of
// its writes (started, succeeded, retried, failed, dead) before each invocation returns.
package main

import (
	"log"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/status"
)

func main() {
	env, clients, logger := awsfn.Setup()
	if env.Lambda == "" {
		log.Fatalf("%s must name the lambda whose tasks this status function serves", awsfn.EnvLambda)
	}
	hsc := status.New(clients.TaskStore(), status.Config{Task: env.Task, Logger: logger, Queue: clients.Queue, Lambdas: clients.Catalog})
	handler := statusfn.NewLambdaHandler(hsc, env.Lambda, logger).Handle
	awsfn.Start(lifecycle.FlushAfter(handler, clients.Events, env.EventsFlush), clients.Invoked)
}
