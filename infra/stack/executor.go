package stack

import (
	"path/filepath"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/registry"
)

// executorStopTimeout is how long ECS waits after SIGTERM before SIGKILL, its longest: the
// executor drains for 100 s (its DefaultDrain) and then releases the tasks it still holds.
const executorStopTimeout = 120 * time.Second

// dockerfile is the executors' Dockerfile, relative to the repository's root.
const dockerfile = "infra/executor/Dockerfile"

// executorCluster is the network and ECS cluster every ecs lambda's service runs in: a VPC with
// private subnets behind NAT gateways (the executors call SQS, DynamoDB and CloudWatch Logs),
// gateway endpoints that keep DynamoDB and S3 (image layers) traffic off the NAT, and flow logs.
// Only a stack with an ecs lambda has one.
type executorCluster struct {
	vpc     awsec2.Vpc
	cluster awsecs.Cluster
}

func newExecutorCluster(scope constructs.Construct, id string, d *deployment) *executorCluster {
	c := constructs.NewConstruct(scope, jsii.String(id))
	flowLogs := awslogs.NewLogGroup(c, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	ec := &executorCluster{}
	ec.vpc = awsec2.NewVpc(c, jsii.String("Vpc"), &awsec2.VpcProps{
		MaxAzs:      jsii.Number(maxAZs),
		NatGateways: jsii.Number(float64(d.env.NATGateways)),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24), MapPublicIpOnLaunch: jsii.Bool(false)},
			{Name: jsii.String("executors"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(20)},
		},
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"DynamoDB": {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB()},
			"S3":       {Service: awsec2.GatewayVpcEndpointAwsService_S3()},
		},
		FlowLogs: &map[string]*awsec2.FlowLogOptions{
			"FlowLog": {Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(flowLogs, nil), TrafficType: awsec2.FlowLogTrafficType_REJECT},
		},
		RestrictDefaultSecurityGroup: jsii.Bool(false),
	})
	ec.cluster = awsecs.NewCluster(c, jsii.String("Cluster"), &awsecs.ClusterProps{
		Vpc:                 ec.vpc,
		ContainerInsightsV2: awsecs.ContainerInsights_ENABLED,
	})
	return ec
}

// executor is the ECS Fargate service of a lambda of kind ecs: ecs.tasks executors
// (functions/executor), each long-polling the lambda's queues in strict priority order and
// running up to the lambda's concurrency of its handler at once. Its task role consumes its own
// queues, and reads and writes the table, through which it claims tasks: the executor runs the
// status controller in-process. Its image holds the executor and the lambda's handler.
type executor struct {
	service  awsecs.FargateService
	task     awsecs.FargateTaskDefinition
	logGroup awslogs.LogGroup
}

func newExecutor(scope constructs.Construct, id string, d *deployment, e registry.Entry, q *queues, s *store, ec *executorCluster) *executor {
	c := constructs.NewConstruct(scope, jsii.String(id))
	x := &executor{}
	x.logGroup = awslogs.NewLogGroup(c, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	x.task = awsecs.NewFargateTaskDefinition(c, jsii.String("Task"), &awsecs.FargateTaskDefinitionProps{
		Cpu:            jsii.Number(float64(e.ECS.CPU)),
		MemoryLimitMiB: jsii.Number(float64(e.ECS.MemoryMB)),
		RuntimePlatform: &awsecs.RuntimePlatform{
			CpuArchitecture:       awsecs.CpuArchitecture_ARM64(),
			OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
		},
	})
	// The binaries must exist to be staged; asset() says to run make build if they don't.
	d.asset(filepath.Join("executor", "bootstrap"))
	d.asset(filepath.Join("workers-"+e.Handler, "bootstrap"))
	assets, err := filepath.Rel(d.root, d.assets)
	if err != nil || filepath.IsAbs(assets) || assets == ".." || len(assets) > 2 && assets[:3] == "../" {
		panic("stack: Props.Assets must lie inside Props.Root, the executors' Docker context")
	}
	image := awsecs.ContainerImage_FromAsset(jsii.String(d.root), &awsecs.AssetImageProps{
		File:       jsii.String(dockerfile),
		Platform:   awsecrassets.Platform_LINUX_ARM64(),
		BuildArgs:  &map[string]*string{"LAMBDA": jsii.String(e.Name), "HANDLER": jsii.String(e.Handler)},
		IgnoreMode: awscdk.IgnoreMode_DOCKER,
		// Stage the three files the image needs, not the repository.
		Exclude: jsii.Strings("*",
			"!"+dockerfile,
			"!"+filepath.ToSlash(filepath.Join(assets, "executor", "bootstrap")),
			"!"+filepath.ToSlash(filepath.Join(assets, "workers-"+e.Handler, "bootstrap"))),
	})
	env := d.commonEnv(d.ownLambdaJSON(e.Name), s.table.TableName())
	env[awsfn.EnvLambda] = jsii.String(e.Name)
	x.task.AddContainer(jsii.String("executor"), &awsecs.ContainerDefinitionOptions{
		Image:       image,
		Essential:   jsii.Bool(true),
		Environment: &env,
		Logging: awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{
			LogGroup: x.logGroup, StreamPrefix: jsii.String(e.Name),
		}),
		StopTimeout: seconds(executorStopTimeout),
		// An init process reaps what handlers leave behind (see functions/executor).
		LinuxParameters: awsecs.NewLinuxParameters(c, jsii.String("Linux"), &awsecs.LinuxParametersProps{
			InitProcessEnabled: jsii.Bool(true),
		}),
	})
	for _, p := range e.Priorities {
		q.queue[p].GrantConsumeMessages(x.task.TaskRole())
	}
	s.grantLambda(x.task.TaskRole(), e.Name, statusActions...)
	s.grantUpstreamReads(x.task.TaskRole())
	suppress(x.task, "AwsSolutions-ECS2", "The environment holds the executor's configuration (table, queue prefix, lambda): names, no secrets.")
	suppress(x.task.ExecutionRole(), "AwsSolutions-IAM5", "ecr:GetAuthorizationToken has no resource-level permissions: it takes Resource *.", "Resource::*")
	x.service = awsecs.NewFargateService(c, jsii.String("Service"), &awsecs.FargateServiceProps{
		Cluster:        ec.cluster,
		TaskDefinition: x.task,
		DesiredCount:   jsii.Number(float64(e.ECS.Tasks)),
		// Start new executors before stopping old ones: stopped ones drain and release.
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
		VpcSubnets:        &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		AssignPublicIp:    jsii.Bool(false),
	})
	return x
}
