// Command api is the API function: API Gateway (REST, IAM auth) → the v1 HTTP API.
package main

import (
	"github.com/openatf/atf/shared/apifn"
	"github.com/openatf/atf/shared/awsfn"
	"github.com/openatf/atf/shared/frontend"
	"github.com/openatf/atf/shared/httpapi"
)

func main() {
	env, clients, logger := awsfn.Setup()
	svc := frontend.New(clients.Store, frontend.Config{Lambdas: env.Lambdas, Task: env.Task})
	awsfn.Start(apifn.New(httpapi.New(svc, logger), logger).Handle)
}
