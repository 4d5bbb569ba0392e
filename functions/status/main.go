// Command status is the status function: workers invoke it to claim tasks, heartbeat and report
// results, over the contract of shared/statusfn.
package main

import (
	"github.com/openatf/atf/shared/awsfn"
	"github.com/openatf/atf/shared/status"
	"github.com/openatf/atf/shared/statusfn"
)

func main() {
	env, clients, logger := awsfn.Setup()
	hsc := status.New(clients.Store, status.Config{Task: env.Task, Logger: logger})
	awsfn.Start(statusfn.NewHandler(hsc, logger).Handle)
}
