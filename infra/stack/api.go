package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The API function's settings. API Gateway waits at most 29 s for an integration. A GET that
// waits for a task's end waits at most frontend.MaxWait (25 s), and ends a second before the
// function's deadline in any case (TestAPITimeoutAllowsTheLongestWait).
const (
	apiTimeout  = 29 * time.Second
	apiMemoryMB = 512
)

// apiRoutes are the v1 API's methods (see README): the lambda is part of every path below
// /v1/lambdas, so that IAM policies can allow a client one lambda's paths
// (arn:aws:execute-api:<region>:<account>:<api>/<stage>/POST/v1/lambdas/send-email/tasks).
var apiRoutes = []struct{ path, method string }{
	{"/v1/lambdas", "GET"},
	{"/v1/lambdas/{lambda}/tasks", "GET"},
	{"/v1/lambdas/{lambda}/tasks", "POST"},
	{"/v1/lambdas/{lambda}/tasks/batch", "POST"},
	{"/v1/lambdas/{lambda}/tasks/{id}", "GET"},
	{"/v1/lambdas/{lambda}/tasks/{id}/cancel", "POST"},
	{"/v1/lambdas/{lambda}/gate", "PUT"},
}

// api is the REST API: every method authorizes with AWS_IAM (SigV4) and goes to the API
// function (functions/api), which reads and writes the table. The stage throttles, writes an
// access log, and logs errors.
type api struct {
	*function
	api       awsapigateway.RestApi
	accessLog awslogs.LogGroup
}

func newAPI(scope constructs.Construct, id string, d *deployment, s *store) *api {
	a := &api{function: newFunction(scope, id+"Function", d, functionProps{
		asset: "api", description: "atf-" + d.name + ": the v1 HTTP API behind API Gateway",
		timeout: apiTimeout, memoryMB: apiMemoryMB, env: d.commonEnv(d.lambdasJSON, s.table.TableName()),
	})}
	s.grant(a.role, apiActions...)

	c := constructs.NewConstruct(scope, jsii.String(id))
	a.accessLog = awslogs.NewLogGroup(c, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	yes := jsii.Bool(true)
	a.api = awsapigateway.NewRestApi(c, jsii.String("RestApi"), &awsapigateway.RestApiProps{
		RestApiName:    jsii.String("atf-" + d.name),
		Description:    jsii.String("atf-" + d.name + ": schedule and inspect tasks (v1)"),
		EndpointTypes:  &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		FailOnWarnings: yes,
		CloudWatchRole: jsii.Bool(d.env.API.CloudWatchRole),
		DeployOptions: &awsapigateway.StageOptions{
			StageName:            jsii.String(d.name),
			ThrottlingRateLimit:  jsii.Number(float64(d.env.API.RateLimit)),
			ThrottlingBurstLimit: jsii.Number(float64(d.env.API.BurstLimit)),
			LoggingLevel:         awsapigateway.MethodLoggingLevel_ERROR,
			MetricsEnabled:       yes,
			AccessLogDestination: awsapigateway.NewLogGroupLogDestination(a.accessLog),
			AccessLogFormat: awsapigateway.AccessLogFormat_JsonWithStandardFields(&awsapigateway.JsonWithStandardFieldProps{
				Caller: yes, HttpMethod: yes, Ip: yes, Protocol: yes, RequestTime: yes,
				ResourcePath: yes, ResponseLength: yes, Status: yes, User: yes,
			}),
		},
		DefaultMethodOptions: &awsapigateway.MethodOptions{AuthorizationType: awsapigateway.AuthorizationType_IAM},
		// One permission lets API Gateway invoke the function for every method.
		DefaultIntegration: awsapigateway.NewLambdaIntegration(a.function.function, &awsapigateway.LambdaIntegrationOptions{
			Proxy: yes, ScopePermissionToMethod: jsii.Bool(false),
		}),
	})
	if d.env.API.CloudWatchRole {
		// The account's logging role outlives the stack: other APIs of the account use it.
		role := a.api.Node().TryFindChild(jsii.String("CloudWatchRole")).(awscdk.Resource)
		role.ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN)
		suppress(role, "AwsSolutions-IAM4", "API Gateway's account-wide logging role: AWS's managed policy for it is the documented way to let API Gateway write execution logs.",
			"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")
	}
	// The function validates bodies and parameters and answers with the API's errors; the
	// validator only makes API Gateway refuse requests that lack a declared path parameter.
	validator := a.api.AddRequestValidator(jsii.String("Validator"), &awsapigateway.RequestValidatorOptions{
		ValidateRequestBody: yes, ValidateRequestParameters: yes,
	})
	for _, r := range apiRoutes {
		a.api.Root().ResourceForPath(jsii.String(r.path)).AddMethod(jsii.String(r.method), nil, &awsapigateway.MethodOptions{
			AuthorizationType: awsapigateway.AuthorizationType_IAM,
			RequestValidator:  validator,
		})
	}
	// After the methods: a suppression covers the children that exist when it is made.
	suppress(a.api, "AwsSolutions-COG4", "Every method authorizes with AWS_IAM (SigV4): callers are IAM principals, scoped per lambda by the resource path, not Cognito users.")
	return a
}
