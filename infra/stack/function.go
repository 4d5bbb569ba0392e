package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// functionProps describe one of atf's functions.
type functionProps struct {
	asset       string // the zip in Assets, without .zip: api, consumer, status, workers-<handler>
	description string
	timeout     time.Duration
	memoryMB    int
	env         map[string]*string
	// reserved is the function's reserved concurrency; zero for none.
	reserved int
	// dropStaleEvents: asynchronous invocations (EventBridge's) are not retried, nor run once
	// older than maxEventAge.
	dropStaleEvents bool
	maxEventAge     time.Duration
}

// function is a Go function on provided.al2023 (arm64) from a `make build` zip, with a log group
// and a role of its own. The role starts empty but for writing to that log group: no managed
// policy, and every other permission comes from a Grant method.
type function struct {
	function awslambda.Function
	role     awsiam.Role
	logGroup awslogs.LogGroup
}

func newFunction(scope constructs.Construct, id string, d *deployment, p functionProps) *function {
	c := constructs.NewConstruct(scope, jsii.String(id))
	f := &function{}
	f.logGroup = awslogs.NewLogGroup(c, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	f.role = awsiam.NewRole(c, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("atf-" + d.name + " " + p.asset + " function"),
	})
	f.logGroup.GrantWrite(f.role)
	props := &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(d.asset(p.asset+".zip")), nil),
		Description:  jsii.String(p.description),
		Timeout:      seconds(p.timeout),
		MemorySize:   jsii.Number(float64(p.memoryMB)),
		Environment:  &p.env,
		Role:         f.role,
		LogGroup:     f.logGroup,
	}
	if p.reserved > 0 {
		// Concurrency counts it for the account's limit.
		props.ReservedConcurrentExecutions = jsii.Number(float64(p.reserved))
	}
	if p.dropStaleEvents {
		props.RetryAttempts = jsii.Number(0)
		props.MaxEventAge = seconds(p.maxEventAge)
	}
	// CDK makes the function (and its event source mappings) depend on the role's policy.
	f.function = awslambda.NewFunction(c, jsii.String("Function"), props)
	return f
}
