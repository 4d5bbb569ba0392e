// Package workerfn is the one entry point of a lambda's Go handler: the same binary runs
//
//   - as a worker function on AWS Lambda, fed SQS batches by the lambda's event source mappings
//     and claiming through the status function (ATF_STATUS_FUNCTION);
//   - once on a sample event, with ATF_INVOKE set (`make invoke`), claiming through an in-process
//     status controller on the configured store when no status function is named;
//   - as a program everywhere else: under `atf dev` and in an ECS executor, which pass the
//     payload on stdin (see worker.Main).
//
// The handler never knows which.
//
// Public surface: with task, worker and client, what a lambda owner imports (here, in the main
// of a Go handler). See the README's Folders.
package workerfn

import (
	"log"
	"os"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/worker"
)

// Main runs h in the mode its environment asks for, and does not return.
func Main(h worker.Handler) {
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" && os.Getenv(awsfn.EnvInvoke) == "" {
		worker.Main(h)
		return
	}
	env, clients, logger := awsfn.Setup()
	l, ok := env.LambdaNamed(env.Lambda)
	if !ok {
		log.Fatalf("%s must name the lambda this function runs", awsfn.EnvLambda)
	}
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" && env.StatusFunction == "" {
		log.Fatalf("%s must name the status function", awsfn.EnvStatusFunction)
	}
	hsc := awsfn.Status(env, clients, logger)
	// The queue brings a record failed for a transient reason back in seconds.
	fn, err := sqsworker.New(sqsworker.Config{Lambda: l, Handler: h, Status: hsc, Queue: clients.Queue, Task: env.Task, Metrics: clients.Metrics, Logger: logger, Worker: env.Worker, LogGroup: env.LogGroup, LogHandlerOutput: true})
	if err != nil {
		log.Fatal(err)
	}
	// Each invocation's end writes its handlers' durations, held in it (emf), in a line or two.
	awsfn.Start(fn.Handle, clients.Invoked)
}
