// Command api is the API function: API Gateway (HTTP API, IAM auth) → the v1 HTTP API. It sends
// the tasks due within 15 minutes to their queues itself (frontend.Config.Queue).
package main

import (
	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
)

func main() {
	env, clients, logger := awsfn.Setup()
	svc := frontend.New(clients.Store, frontend.Config{Lambdas: env.Lambdas, Task: env.Task, Queue: clients.Queue, Logger: logger})
	awsfn.Start(apifn.New(httpapi.New(svc, logger), logger).Handle)
}
