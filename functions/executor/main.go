// Command executor is the ECS executor of one lambda, the container main of its ECS service. Its
// logic, and the configuration it reads (flags and the environment), are package
// shared/adapter/ecsexecutor's.
//
// On SIGTERM (what ECS sends before it stops a task) or SIGINT it drains and exits 0. A second
// signal ends the process at once; its running tasks then come back through their heartbeat
// timeouts. A configuration it cannot use exits 2. Logs are JSON lines on stderr.
//
// As the container's first process the executor does not reap orphaned grandchildren of handlers:
// run the container with an init process (initProcessEnabled in the ECS task definition) if
// handlers leave any.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ecsexecutor"
)

func main() {
	log := awsfn.Logger()
	cfg, err := ecsexecutor.Load(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		log.Error("executor cannot start", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := ecsexecutor.Serve(ctx, stop, cfg, log); err != nil {
		log.Error("executor failed", "err", err)
		os.Exit(1)
	}
}
