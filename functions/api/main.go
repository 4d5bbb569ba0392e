// Command api is the API function: API Gateway (REST, IAM auth) → the v1 HTTP API.
package main

import (
	"context"
	"log"

	"github.com/openatf/atf/shared/apifn"
	"github.com/openatf/atf/shared/awsfn"
	"github.com/openatf/atf/shared/frontend"
	"github.com/openatf/atf/shared/httpapi"
)

func main() {
	env, err := awsfn.LoadEnv()
	if err != nil {
		log.Fatal(err)
	}
	logger := awsfn.Logger()
	clients, err := awsfn.Open(context.Background(), env, logger)
	if err != nil {
		log.Fatal(err)
	}
	svc := frontend.New(clients.Store, frontend.Config{Lambdas: env.Lambdas, Task: env.Task})
	awsfn.Start(apifn.New(httpapi.New(svc, logger), logger).Handle)
}
