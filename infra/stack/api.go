package stack

import (
	"strconv"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
)

// The API function's settings. The integration waits at most 29 s for the function (CDK allows no
// more). A GET that waits for a task's end waits at most frontend.MaxWait (25 s), and ends a
// second before the function's deadline in any case (TestAPITimeoutAllowsTheLongestWait).
const (
	apiTimeout  = 29 * time.Second
	apiMemoryMB = 512
)

// apiStage is the HTTP API's stage: $default, served at the API's root. A named stage would put
// its name in front of the path that payload format 1.0 hands the function.
const apiStage = "$default"

// apiRoutes are the v1 API's methods, the operations of its contract (httpapi.OpenAPI; a test holds
// them to it): the lambda is part of every path below /v1/lambdas, so that IAM policies can allow
// a client one lambda's paths (arn:aws:execute-api:<region>:<account>:<api>/*/POST/v1/lambdas/send-email/tasks).
var apiRoutes = []struct{ path, method string }{
	{"/v1/lambdas", "GET"},
	{"/v1/lambdas/{lambda}/tasks", "GET"},
	{"/v1/lambdas/{lambda}/tasks", "POST"},
	{"/v1/lambdas/{lambda}/tasks/batch", "POST"},
	{"/v1/lambdas/{lambda}/tasks/{id}", "GET"},
	{"/v1/lambdas/{lambda}/tasks/{id}/cancel", "POST"},
	{"/v1/lambdas/{lambda}/tasks/cancel", "POST"},
	{"/v1/lambdas/{lambda}/tasks/{id}/redrive", "POST"},
	{"/v1/lambdas/{lambda}/tasks/redrive", "POST"},
	{"/v1/lambdas/{lambda}/tasks/{id}/after", "POST"},
	{"/v1/lambdas/{lambda}/tasks/{id}/downstreams", "GET"},
	{"/v1/lambdas/{lambda}/tasks/{id}/attempts", "GET"},
	{"/v1/lambdas/{lambda}/gate", "PUT"},
	// The failed tasks of every lambda: no lambda in its path, so a policy that allows a client
	// its own lambdas' paths does not allow it.
	{"/v1/tasks", "GET"},
	// The live feed of lifecycle events: atf dev's; the API function answers 501 (subscribe on
	// EventBridge), a route all the same so that the answer says so rather than a bare 404.
	{"/v1/lambdas/{lambda}/events", "GET"},
	// Periodic schedules.
	{"/v1/lambdas/{lambda}/schedules", "GET"},
	{"/v1/lambdas/{lambda}/schedules", "POST"},
	{"/v1/lambdas/{lambda}/schedules/{id}", "GET"},
	{"/v1/lambdas/{lambda}/schedules/{id}", "DELETE"},
	{"/v1/lambdas/{lambda}/schedules/{id}", "PATCH"},
	{"/v1/lambdas/{lambda}/schedules/{id}/pause", "POST"},
	{"/v1/lambdas/{lambda}/schedules/{id}/resume", "POST"},
	// The API's OpenAPI contract: no lambda's data, but behind IAM like every route.
	{"/v1/openapi.json", "GET"},
}

// api is an API Gateway HTTP API ($1.00 a million requests; a REST API costs $3.50 and gives
// atf nothing it uses more): every route authorizes with AWS_IAM (SigV4) and goes to the API
// function (functions/api) with payload format 1.0, the REST proxy event that apifn reads. The
// stage throttles every route and writes a JSON access log. HTTP APIs have no execution logs, so
// no account-wide logging role either.
type api struct {
	*function
	api       awsapigatewayv2.HttpApi
	stage     awsapigatewayv2.HttpStage
	accessLog awslogs.LogGroup
}

// apiEnv is the API function's environment: a writer's, and whether it sends first.
func (d *deployment) apiEnv(table *string) map[string]*string {
	env := d.writerEnv("", table)
	env[awsfn.EnvSendFirst] = jsii.String(strconv.FormatBool(d.env.sendFirst()))
	return env
}

func newAPI(scope constructs.Construct, id string, d *deployment, s *store) *api {
	a := &api{function: newFunction(scope, id+"Function", d, functionProps{
		asset: "api", description: "atf-" + d.name + ": the v1 HTTP API behind API Gateway",
		timeout: apiTimeout, memoryMB: apiMemoryMB, env: d.apiEnv(s.table.TableName()),
	})}
	s.grant(a.role, apiActions...)
	d.grantPublish(a.role)
	d.grantReadLambdas(a.role)
	// A task due within 15 minutes is sent to its queue by the request that schedules it.
	d.grantQueues(a.role, queueSendActions)

	c := constructs.NewConstruct(scope, jsii.String(id))
	a.accessLog = awslogs.NewLogGroup(c, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	iam := awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	a.api = awsapigatewayv2.NewHttpApi(c, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String("atf-" + d.name),
		Description:        jsii.String("atf-" + d.name + ": schedule and inspect tasks (v1)"),
		CreateDefaultStage: jsii.Bool(false),
		DefaultAuthorizer:  iam,
	})
	a.stage = awsapigatewayv2.NewHttpStage(c, jsii.String("Stage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    a.api,
		StageName:  jsii.String(apiStage),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit: jsii.Number(float64(d.env.API.RateLimit)), BurstLimit: jsii.Number(float64(d.env.API.BurstLimit)),
		},
		AccessLogSettings: &accessLogSettings{
			destination: awsapigatewayv2.NewLogGroupLogDestination(a.accessLog),
			format:      awsapigateway.AccessLogFormat_Custom(jsii.String(accessLogFormat)),
		},
	})
	// One integration, and one permission that lets API Gateway invoke the function for every route.
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("Function"), a.function.function, &awsapigatewayv2integrations.HttpLambdaIntegrationProps{
		PayloadFormatVersion:   awsapigatewayv2.PayloadFormatVersion_VERSION_1_0(),
		ScopePermissionToRoute: jsii.Bool(false),
		Timeout:                seconds(apiTimeout),
	})
	for _, r := range apiRoutes {
		a.api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path: jsii.String(r.path), Methods: &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.method)},
			Integration: integration, Authorizer: iam,
		})
	}
	return a
}

// accessLogFormat is one JSON record per request, of HTTP API context variables: who called
// (the IAM caller, as API Gateway checked its signature), what, and how it went.
const accessLogFormat = `{"requestId":"$context.requestId","requestTime":"$context.requestTime",` +
	`"httpMethod":"$context.httpMethod","routeKey":"$context.routeKey","path":"$context.path",` +
	`"protocol":"$context.protocol","status":"$context.status","responseLength":"$context.responseLength",` +
	`"ip":"$context.identity.sourceIp","caller":"$context.identity.caller","user":"$context.identity.user",` +
	`"userArn":"$context.identity.userArn","integrationError":"$context.integrationErrorMessage"}`

// accessLogSettings is a stage's access log: CDK takes it as an interface.
type accessLogSettings struct {
	destination awsapigatewayv2.IAccessLogDestination
	format      awsapigateway.AccessLogFormat
}

func (s *accessLogSettings) Destination() awsapigatewayv2.IAccessLogDestination { return s.destination }
func (s *accessLogSettings) Format() awsapigateway.AccessLogFormat              { return s.format }
