// Command api is the API function: API Gateway (REST, IAM auth) → the v1 HTTP API.
package main

import (
	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
)

func main() {
	env, clients, logger := awsfn.Setup()
	svc := frontend.New(clients.Store, frontend.Config{Lambdas: env.Lambdas, Task: env.Task})
	awsfn.Start(apifn.New(httpapi.New(svc, logger), logger).Handle)
}
