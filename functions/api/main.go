// Command api is the API function: API Gateway (HTTP API, IAM auth) → the v1 HTTP API. It sends
// the tasks due within 15 minutes to their queues itself (frontend.Config.Queue), before it writes
// them with ATF_SEND_FIRST (frontend.Config.SendFirst). With ATF_EVENT_BUS it
// publishes the lifecycle events of its writes (scheduled, cancelled) before each invocation returns.
package main

import (
	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/lifecycle"
)

func main() {
	env, clients, logger := awsfn.Setup()
	svc := frontend.New(clients.TaskStore(), frontend.Config{Lambdas: clients.Catalog, Task: env.Task, Queue: clients.Queue, SendFirst: env.SendFirst, Logger: logger})
	handler := apifn.New(httpapi.New(svc, logger), logger).Handle
	awsfn.Start(lifecycle.FlushAfter(handler, clients.Events, env.EventsFlush), clients.Invoked)
}
