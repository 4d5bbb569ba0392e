package stack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapplicationautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
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

// executorCluster is the network and ECS cluster every ecs lambda's service runs in: a VPC,
// gateway endpoints that keep DynamoDB and S3 (image layers) traffic inside AWS's network (they
// cost nothing), and flow logs. The core stack makes one per environment (without ecs=false),
// whatever the registry holds, so that it does not change with the lambdas; the lambda stacks
// run their executors in it (importExecutorCluster). One VPC for all: an account has 5 VPCs a
// region by default, and each NAT gateway costs by the hour, so a VPC per lambda stack would run
// out at five teams and multiply the standing charge. The executors call SQS, DynamoDB, ECR and
// CloudWatch Logs, so they need a way out:
//
//   - nat_gateways > 0: private subnets behind that many NAT gateways (an hourly charge each,
//     and per GB), the executors without a public address;
//   - nat_gateways = 0 (dev's default): public subnets only, and each executor gets a public IPv4
//     address for its egress, charged by the hour only while it runs. Its security group admits
//     no inbound traffic, so the address serves outbound connections alone. No interface
//     endpoint either: each costs by the hour in every zone, more than the addresses of
//     executors that scale to zero.
type executorCluster struct {
	cluster awsecs.ICluster
	// subnets are where the executors run, and publicIP whether they need an address of their own.
	subnets  *awsec2.SubnetSelection
	publicIP bool
}

// The SSM parameters through which the core hands its executors' network to the lambda stacks:
// read at deploy time (a CloudFormation parameter of type AWS::SSM::Parameter::Value), not an
// export, so that neither stack blocks the other's update or deletion.
func executorsVpcParameter(env string) string     { return "/atf/" + env + "/executors/vpc-id" }
func executorsSubnetsParameter(env string) string { return "/atf/" + env + "/executors/subnet-ids" }

func newExecutorCluster(scope constructs.Construct, id string, d *deployment) *executorCluster {
	c := constructs.NewConstruct(scope, jsii.String(id))
	flowLogs := awslogs.NewLogGroup(c, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
		Retention: d.env.logRetention(), RemovalPolicy: d.removal,
	})
	subnetType, publicIP := executorSubnets(d.env)
	subnets := []*awsec2.SubnetConfiguration{
		{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24), MapPublicIpOnLaunch: jsii.Bool(false)},
		{Name: jsii.String("executors"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(20)},
	}
	if publicIP {
		subnets = []*awsec2.SubnetConfiguration{
			{Name: jsii.String("executors"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(20), MapPublicIpOnLaunch: jsii.Bool(false)},
		}
	}
	vpc := awsec2.NewVpc(c, jsii.String("Vpc"), &awsec2.VpcProps{
		MaxAzs:              jsii.Number(maxAZs),
		NatGateways:         jsii.Number(float64(d.env.NATGateways)),
		SubnetConfiguration: &subnets,
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"DynamoDB": {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB()},
			"S3":       {Service: awsec2.GatewayVpcEndpointAwsService_S3()},
		},
		FlowLogs: &map[string]*awsec2.FlowLogOptions{
			"FlowLog": {Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(flowLogs, nil), TrafficType: awsec2.FlowLogTrafficType_REJECT},
		},
		RestrictDefaultSecurityGroup: jsii.Bool(false),
	})
	insights := awsecs.ContainerInsights_DISABLED
	if d.env.ContainerInsights {
		insights = awsecs.ContainerInsights_ENABLED
	}
	cluster := awsecs.NewCluster(c, jsii.String("Cluster"), &awsecs.ClusterProps{
		ClusterName:         jsii.String(d.prefix),
		Vpc:                 vpc,
		ContainerInsightsV2: insights,
	})
	if !d.env.ContainerInsights {
		suppress(cluster, "AwsSolutions-ECS4", "container_insights is off in this environment (infra/environments.json): its metrics are billed per hour an executor runs; the executors' logs and the SQS and atf metrics remain.")
	}
	awsssm.NewStringParameter(c, jsii.String("VpcId"), &awsssm.StringParameterProps{
		ParameterName: jsii.String(executorsVpcParameter(d.name)), StringValue: vpc.VpcId(),
		Description: jsii.String("atf-" + d.name + ": the VPC of the ecs lambdas' executors"),
	})
	awsssm.NewStringParameter(c, jsii.String("SubnetIds"), &awsssm.StringParameterProps{
		ParameterName: jsii.String(executorsSubnetsParameter(d.name)),
		StringValue:   awscdk.Fn_Join(jsii.String(","), vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetType: subnetType}).SubnetIds),
		Description:   jsii.String("atf-" + d.name + ": the subnets of the ecs lambdas' executors, comma-separated"),
	})
	return &executorCluster{cluster: cluster, subnets: &awsec2.SubnetSelection{SubnetType: subnetType}, publicIP: publicIP}
}

// executorSubnets is the type of the executors' subnets, and whether an executor needs a public
// address (no NAT gateway).
func executorSubnets(e Environment) (awsec2.SubnetType, bool) {
	if e.NATGateways == 0 {
		return awsec2.SubnetType_PUBLIC, true
	}
	return awsec2.SubnetType_PRIVATE_WITH_EGRESS, false
}

// importExecutorCluster is the core's cluster in a lambda stack: by its name atf-<env>, in the
// VPC and subnets the core wrote to SSM.
func importExecutorCluster(scope constructs.Construct, id string, d *deployment) *executorCluster {
	c := constructs.NewConstruct(scope, jsii.String(id))
	vpcID := awsssm.StringParameter_ValueForStringParameter(c, jsii.String(executorsVpcParameter(d.name)), nil)
	subnetIDs := awsssm.StringParameter_ValueForStringParameter(c, jsii.String(executorsSubnetsParameter(d.name)), nil)
	var subnets []awsec2.ISubnet
	var zones []*string
	for i := range maxAZs {
		id := awscdk.Fn_Select(jsii.Number(float64(i)), awscdk.Fn_Split(jsii.String(","), subnetIDs, jsii.Number(maxAZs)))
		subnet := awsec2.Subnet_FromSubnetId(c, jsii.String(fmt.Sprintf("Subnet%d", i)), id)
		awscdk.Annotations_Of(subnet).AcknowledgeWarning(jsii.String("@aws-cdk/aws-ec2:noSubnetRouteTableId"),
			jsii.String("the executors' service places its tasks by subnet id; it reads no route table"))
		subnets = append(subnets, subnet)
		zones = append(zones, awscdk.Fn_Select(jsii.Number(float64(i)), awscdk.Fn_GetAzs(jsii.String(""))))
	}
	vpc := awsec2.Vpc_FromVpcAttributes(c, jsii.String("Vpc"), &awsec2.VpcAttributes{VpcId: vpcID, AvailabilityZones: &zones})
	cluster := awsecs.Cluster_FromClusterAttributes(c, jsii.String("Cluster"), &awsecs.ClusterAttributes{
		ClusterName: jsii.String(d.prefix), Vpc: vpc,
	})
	_, publicIP := executorSubnets(d.env)
	return &executorCluster{cluster: cluster, subnets: &awsec2.SubnetSelection{Subnets: &subnets}, publicIP: publicIP}
}

// executor is the ECS Fargate service of a lambda of kind ecs: ecs.tasks executors
// (functions/executor), each long-polling the lambda's queues in strict priority order and
// running up to the lambda's concurrency of its handler at once. Its task role consumes its own
// queues, and reads and writes the table, through which it claims tasks: the executor runs the
// status controller in-process. Its image holds the executor and the lambda's handler, a Go
// handler's build or a program (any executable, on a base image with its interpreter).
type executor struct {
	service  awsecs.FargateService
	task     awsecs.FargateTaskDefinition
	logGroup awslogs.LogGroup
	// waiting and busy are the queue metrics it scales on (nil for a fixed count): messages
	// waiting, and messages waiting, delayed or claimed.
	waiting, busy awscloudwatch.IMetric
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
	assets, err := filepath.Rel(d.root, d.assets)
	if err != nil || filepath.IsAbs(assets) || assets == ".." || len(assets) > 2 && assets[:3] == "../" {
		panic("stack: Props.Assets must lie inside Props.Root, the executors' Docker context")
	}
	executorFile := filepath.ToSlash(filepath.Join(assets, "executor", "bootstrap"))
	handlerFile := d.handlerFile(e, assets)
	image := awsecs.ContainerImage_FromAsset(jsii.String(d.root), &awsecs.AssetImageProps{
		File:     jsii.String(dockerfile),
		Platform: awsecrassets.Platform_LINUX_ARM64(),
		BuildArgs: &map[string]*string{
			"BASE": jsii.String(e.ECS.Image), "LAMBDA": jsii.String(e.Name), "HANDLER_FILE": jsii.String(handlerFile),
		},
		IgnoreMode: awscdk.IgnoreMode_DOCKER,
		// Stage the three files the image needs, not the repository.
		Exclude: jsii.Strings("*", "!"+dockerfile, "!"+executorFile, "!"+handlerFile),
	})
	env := d.writerEnv(d.ownLambdaJSON(e.Name), s.table.TableName())
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
		q.queue[p].GrantSendMessages(x.task.TaskRole()) // retries due soon (status.Config.Queue)
	}
	s.grantLambda(x.task.TaskRole(), e.Name, statusActions...)
	s.grantUpstreamReads(x.task.TaskRole())
	s.grantGateReads(x.task.TaskRole())
	d.grantPublish(x.task.TaskRole())
	suppress(x.task, "AwsSolutions-ECS2", "The environment holds the executor's configuration (table, queue prefix, lambda): names, no secrets.")
	suppress(x.task.ExecutionRole(), "AwsSolutions-IAM5", "ecr:GetAuthorizationToken has no resource-level permissions: it takes Resource *.", "Resource::*")
	props := &awsecs.FargateServiceProps{
		Cluster:        ec.cluster,
		TaskDefinition: x.task,
		// Start new executors before stopping old ones: stopped ones drain and release.
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
		VpcSubnets:        ec.subnets,
		AssignPublicIp:    jsii.Bool(ec.publicIP),
	}
	window, scales := scaleInWindow(e)
	if !scales {
		// Runs too long, or queues too many, to see the end of from the queues' metrics: a fixed
		// count.
		props.DesiredCount = jsii.Number(float64(e.ECS.Tasks))
	}
	// With scaling, DesiredCount is left out: a deployment keeps the count scaling set (the first
	// one starts a single executor, which the scale-in brings to zero when nothing comes).
	x.service = awsecs.NewFargateService(c, jsii.String("Service"), props)
	if scales {
		x.scaleOnQueues(c, d, e, q, ec, window)
	}
	return x
}

// handlerFile is the file of e's handler that its executor's image carries, relative to Root
// (slash-separated): its program, which the registry names relative to its folder, the
// repository's root; or its Go handler's build in Assets (assets, relative to Root).
func (d *deployment) handlerFile(e registry.Entry, assets string) string {
	if e.Program == "" {
		d.asset(filepath.Join("workers-"+e.Handler, "bootstrap"))
		return filepath.ToSlash(filepath.Join(assets, "workers-"+e.Handler, "bootstrap"))
	}
	path := filepath.Join(d.root, filepath.FromSlash(e.Program))
	info, err := os.Stat(path)
	if err == nil && (!info.Mode().IsRegular() || info.Mode()&0o111 == 0) {
		err = errors.New("not an executable file (chmod +x it)")
	}
	if err != nil {
		panic(fmt.Errorf("lambda %s: program %s must be an executable file in the repository (Props.Root), the executor image's Docker context: %w", e.Name, path, err))
	}
	return e.Program
}

// Scaling to zero: an ecs lambda's executors start when messages wait in its queues, and stop
// when none has waited, been delayed or been claimed for longer than a task can run.
const (
	// scaleInMargin is what the scale-in window adds to the lambda's timeout: a claim's time, the
	// executor's drain, and a late metric.
	scaleInMargin = 5 * time.Minute
	// scaleOutCooldown is how long scale-out waits before adding more: about the time a Fargate
	// task takes to start and receive.
	scaleOutCooldown = 2 * time.Minute
	// scaleInCooldown is how long Application Auto Scaling refuses another scale-in after one. It
	// does not keep a new executor from being stopped (a scale-out ends it): the scale-in alarm
	// does, by reading the waiting messages that started it.
	scaleInCooldown = 5 * time.Minute
	// maxScaleInWindow is the longest window a CloudWatch alarm evaluates (periods × period).
	maxScaleInWindow = 24 * time.Hour
	// maxAlarmMetrics is how many metrics a CloudWatch alarm's expression may use, a hard limit.
	maxAlarmMetrics = 10
	// scaleOutTiers bounds how many executors one scale-out adds.
	scaleOutTiers = 4
)

// scaleInMetrics are what the scale-in alarm reads of each priority's queue, per minute: messages
// waiting (visible) and delayed, at most, and the messages deleted, which an executor does once
// a claim of it is settled, and for a task it runs once the run's end is written (its message
// times the lease: docs/guarantees.md, "The queue as the lease timer"). Messages in flight
// (ApproximateNumberOfMessagesNotVisible) are left out, for the alarm's 10 metrics to cover three
// priorities: an executor's received message is settled within its visibility of 30 s, or
// visible again, or held by a running task, whose end's delete comes within its timeout.
var scaleInMetrics = []struct{ name, statistic string }{
	{"ApproximateNumberOfMessagesVisible", "Maximum"},
	{"ApproximateNumberOfMessagesDelayed", "Maximum"},
	{"NumberOfMessagesDeleted", "Sum"},
}

// scaleInWindow is how long an ecs lambda's queues must show no message waiting, delayed or
// claimed before its executors stop, and whether it scales at all: an alarm cannot watch a window
// over a day (that would stop executors in the middle of tasks), nor more metrics than
// maxAlarmMetrics (three priorities' queues).
func scaleInWindow(e registry.Entry) (time.Duration, bool) {
	w := (e.Timeout + scaleInMargin).Round(time.Minute)
	if w < e.Timeout+scaleInMargin {
		w += time.Minute
	}
	return w, w <= maxScaleInWindow && len(scaleInMetrics)*len(e.Priorities) <= maxAlarmMetrics
}

// scaleOnQueues scales the executors between 0 and the registry's tasks on the lambda's queue
// depth, with step scaling (Application Auto Scaling) on two alarms:
//
//   - out: ApproximateNumberOfMessagesVisible, summed over the priorities, is at least 1 for a
//     minute: one executor more per started concurrency of waiting messages, at most
//     scaleOutTiers at once, again after each cooldown while messages wait;
//   - in (to zero): for the whole window (the lambda's timeout plus scaleInMargin), no message
//     waited (visible) or was delayed, and none was deleted (an executor deletes a task's message
//     when its run ends, or when its claim is refused): scaleInMetrics. So the last task claimed
//     has ended (its timeout has passed) before its executor is stopped, and an executor started for a message that came
//     after a scale-in is not stopped again: the message, visible until it is claimed, takes the
//     alarm out of ALARM when it starts the scale-out (both alarms read it), and its run, whose end deletes it, keeps
//     it out for a window. While in ALARM, the alarm invokes its policy every minute, so this,
//     and not the cooldown, is what keeps it from stopping new executors.
//
// SQS publishes a queue's metrics every minute while it is active, and stops after six hours
// without messages or requests: then the out alarm has no data, the count stays at zero, and the
// first message sent brings the metrics, and an executor, back within minutes.
func (x *executor) scaleOnQueues(scope constructs.Construct, d *deployment, e registry.Entry, q *queues, ec *executorCluster, window time.Duration) {
	c := constructs.NewConstruct(scope, jsii.String("Scaling"))
	target := awsapplicationautoscaling.NewScalableTarget(c, jsii.String("Target"), &awsapplicationautoscaling.ScalableTargetProps{
		ServiceNamespace:  awsapplicationautoscaling.ServiceNamespace_ECS,
		ScalableDimension: jsii.String("ecs:service:DesiredCount"),
		ResourceId:        awscdk.Fn_Join(jsii.String("/"), jsii.Strings("service", *ec.cluster.ClusterName(), *x.service.ServiceName())),
		MinCapacity:       jsii.Number(0),
		MaxCapacity:       jsii.Number(float64(e.ECS.Tasks)),
		// Application Auto Scaling's service-linked role for ECS, as CDK's AutoScaleTaskCount uses.
		Role: awsiam.Role_FromRoleArn(c, jsii.String("Role"), d.stack.FormatArn(&awscdk.ArnComponents{
			Region: jsii.String(""), Service: jsii.String("iam"), Resource: jsii.String("role/aws-service-role/ecs.application-autoscaling.amazonaws.com"),
			ResourceName: jsii.String("AWSServiceRoleForApplicationAutoScaling_ECSService"),
		}), nil),
	})
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	sum := func(label string, metric func(p string) awscloudwatch.IMetric) awscloudwatch.IMetric {
		using := map[string]awscloudwatch.IMetric{}
		for i, p := range q.priorities {
			using[fmt.Sprintf("m%d", i)] = metric(p)
		}
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("SUM(METRICS())"), UsingMetrics: &using, Label: jsii.String(label), Period: minute,
		})
	}
	stat := func(s string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Statistic: jsii.String(s), Period: minute}
	}
	x.waiting = sum("messages waiting", func(p string) awscloudwatch.IMetric {
		return q.queue[p].MetricApproximateNumberOfMessagesVisible(stat("Maximum"))
	})
	inIdle := map[string]awscloudwatch.IMetric{}
	for i, p := range q.priorities {
		for j, m := range scaleInMetrics {
			inIdle[fmt.Sprintf("m%d_%d", i, j)] = q.queue[p].Metric(jsii.String(m.name), stat(m.statistic))
		}
	}
	x.busy = awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String("SUM(METRICS())"), UsingMetrics: &inIdle, Label: jsii.String("messages waiting, delayed or claimed"), Period: minute,
	})

	out := awsapplicationautoscaling.NewStepScalingAction(c, jsii.String("Out"), &awsapplicationautoscaling.StepScalingActionProps{
		ScalingTarget: target, AdjustmentType: awsapplicationautoscaling.AdjustmentType_CHANGE_IN_CAPACITY,
		Cooldown: seconds(scaleOutCooldown), MetricAggregationType: awsapplicationautoscaling.MetricAggregationType_MAXIMUM,
	})
	// The alarm fires at 1 waiting message; the policy sees how far over that the metric is.
	per := float64(e.Concurrency)
	tiers := min(scaleOutTiers, e.ECS.Tasks)
	for k := 1; k <= tiers; k++ {
		t := &awsapplicationautoscaling.AdjustmentTier{Adjustment: jsii.Number(float64(k)), LowerBound: jsii.Number(float64(k-1) * per)}
		if k < tiers {
			t.UpperBound = jsii.Number(float64(k) * per)
		}
		out.AddAdjustment(t)
	}
	outAlarm := awscloudwatch.NewAlarm(c, jsii.String("OutAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("atf-" + d.name + ": tasks of " + e.Name + " wait in its queues: start executors"),
		Metric:             x.waiting,
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	outAlarm.AddAlarmAction(awscloudwatchactions.NewApplicationScalingAction(out))

	in := awsapplicationautoscaling.NewStepScalingAction(c, jsii.String("In"), &awsapplicationautoscaling.StepScalingActionProps{
		ScalingTarget: target, AdjustmentType: awsapplicationautoscaling.AdjustmentType_EXACT_CAPACITY,
		Cooldown: seconds(scaleInCooldown), MetricAggregationType: awsapplicationautoscaling.MetricAggregationType_MAXIMUM,
	})
	in.AddAdjustment(&awsapplicationautoscaling.AdjustmentTier{Adjustment: jsii.Number(0), UpperBound: jsii.Number(0)})
	periods := jsii.Number(window.Minutes())
	inAlarm := awscloudwatch.NewAlarm(c, jsii.String("InAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("atf-" + d.name + ": no task of " + e.Name + " waiting, delayed, claimed or running for " + window.String() + ": stop its executors"),
		Metric:             x.busy,
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_LESS_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  periods,
		DatapointsToAlarm:  periods,
		// No data is no evidence of idleness: an executor keeps its queues active while it runs.
		TreatMissingData: awscloudwatch.TreatMissingData_MISSING,
	})
	inAlarm.AddAlarmAction(awscloudwatchactions.NewApplicationScalingAction(in))
}
