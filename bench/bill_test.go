package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/cost"
)

// billFixture is a template with one resource of each kind the bill prices, and some it must
// leave out: a gateway endpoint, a dead-letter queue with no mapping, a service scaled to zero.
const billFixture = `{"Resources": {
  "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {"AllocationId": {"Fn::GetAtt": ["Eip", "AllocationId"]}}},
  "Eip": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
  "SqsEndpoint": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface",
    "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".sqs"]]},
    "SubnetIds": [{"Ref": "A"}, {"Ref": "B"}]}},
  "S3Endpoint": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"ServiceName": "com.amazonaws.us-east-1.s3"}},
  "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors", "Period": 60}},
  "MathAlarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Metrics": [
    {"Id": "a", "MetricStat": {"Period": 10}}, {"Id": "b", "MetricStat": {"Period": 10}}, {"Id": "e", "Expression": "a+b"}]}},
  "D1": {"Type": "AWS::CloudWatch::Dashboard"}, "D2": {"Type": "AWS::CloudWatch::Dashboard"},
  "D3": {"Type": "AWS::CloudWatch::Dashboard"}, "D4": {"Type": "AWS::CloudWatch::Dashboard"},
  "Key": {"Type": "AWS::KMS::Key"},
  "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "atf-dev-echo-normal"}},
  "DeadLetters": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "atf-dev-echo-normal-dlq"}},
  "Mapping": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]}}},
  "Task": {"Type": "AWS::ECS::TaskDefinition", "Properties": {"Cpu": "256", "Memory": "512", "RuntimePlatform": {"CpuArchitecture": "ARM64"}}},
  "Always": {"Type": "AWS::ECS::Service", "Properties": {"DesiredCount": 1, "TaskDefinition": {"Ref": "Task"},
    "NetworkConfiguration": {"AwsvpcConfiguration": {"AssignPublicIp": "ENABLED"}}}},
  "ToZero": {"Type": "AWS::ECS::Service", "Properties": {"DesiredCount": 1, "TaskDefinition": {"Ref": "Task"}}},
  "ToZeroScaling": {"Type": "AWS::ApplicationAutoScaling::ScalableTarget", "Properties": {"ServiceNamespace": "ecs", "MinCapacity": 0,
    "ResourceId": {"Fn::Join": ["", ["service/", {"Ref": "Cluster"}, "/", {"Fn::GetAtt": ["ToZero", "Name"]}]]}}},
  "ConsumerLogs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 7}},
  "Consumer": {"Type": "AWS::Lambda::Function", "Properties": {"MemorySize": 128, "LoggingConfig": {"LogGroup": {"Ref": "ConsumerLogs"}}}},
  "Schedule": {"Type": "AWS::Events::Rule", "Properties": {"ScheduleExpression": "rate(1 minute)",
    "Targets": [{"Arn": {"Fn::GetAtt": ["Consumer", "Arn"]}, "Id": "Target0"}]}}
}}`

// TestIdleBill: every resource with a standing charge is a line of its own, priced from the
// named constants; free resources have none; the consumer is priced at the template's memory and
// schedule.
func TestIdleBill(t *testing.T) {
	tpl, err := parseTemplate([]byte(billFixture))
	if err != nil {
		t.Fatal(err)
	}
	memoryMB, period, err := tpl.consumer()
	if err != nil || memoryMB != 128 || period.Minutes() != 1 {
		t.Fatalf("consumer: %d MB every %s, %v", memoryMB, period, err)
	}
	idle := IdleResult{MemoryMB: 128, InvocationMS: 100, Usage: cost.Usage{
		ReadUnits: 43_800 * 50, LogBytes: 43_800 * 1000,
		Lambda: map[string]cost.LambdaUse{"consumer": {Invocations: 43_800, GBSeconds: 43_800 * cost.GBSeconds(100, 128)}},
	}}
	b := idleBill(stacks{tpl}, idle)
	got := map[string]float64{}
	for _, l := range b.Lines {
		got[l.Kind+" "+l.Resource] += l.USD
	}
	h := 730.0
	fargate := (0.25*FargateArmVCPUPerHour + 0.5*FargateArmGBPerHour) * h
	want := map[string]float64{
		"NAT gateway Nat":                    NATGatewayPerHour * h,
		"public IPv4 address Eip":            PublicIPv4PerHour * h,
		"interface endpoint sqs SqsEndpoint": 2 * InterfaceEndpointPerAZHour * h,
		"alarm Alarm":                        CloudWatchAlarmPerMetricMonth,
		"alarm MathAlarm":                    2 * CloudWatchHighResAlarmPerMetricMonth,
		"dashboard D1":                       0,
		"dashboard D2":                       0,
		"dashboard D3":                       0,
		"dashboard D4":                       CloudWatchDashboardPerMonth,
		"KMS key Key":                        KMSKeyPerMonth,
		"Fargate tasks (0.25 vCPU, 0.5 GB) Always":                       fargate,
		"public IPv4 address of Fargate tasks Always":                    PublicIPv4PerHour * h,
		"idle SQS polls of an event source mapping atf-dev-echo-normal":  ESMIdlePollers * h * 3600 / SQSLongPollWaitSeconds * cost.SQSStandardPerMillion / 1e6,
		"idle receives of the dead-letter drain atf-dev-echo-normal-dlq": h * 12 * cost.SQSStandardPerMillion / 1e6, // every 5 minutes
		"consumer invocations Consumer":                                  43_800*cost.LambdaRequestsPerMillion/1e6 + 43_800*cost.GBSeconds(100, 128)*cost.LambdaArmPerGBSecond,
		"consumer reads Consumer":                                        43_800 * 50 * cost.DynamoDBReadPerMillion / 1e6,
		"consumer log ingestion Consumer":                                43_800 * 1000 / float64(1<<30) * cost.CloudWatchLogsPerGB,
		"log storage Consumer":                                           43_800 * 1000 / float64(1<<30) * 7 / 30.4 * CloudWatchLogsStoragePerGBMonth,
	}
	total := 0.0
	for k, w := range want {
		total += w
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s: $%v, want $%v (present %v)", k, g, w, ok)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected line %s", k)
		}
	}
	if math.Abs(b.Total-total) > 1e-9 {
		t.Errorf("total $%v, want $%v", b.Total, total)
	}
	var out bytes.Buffer
	b.Print(&out, &idle)
	if n := strings.Count(out.String(), "\n| "); n != len(b.Lines)+2 { // the header's separator and the total
		t.Errorf("printed %d rows for %d lines:\n%s", n, len(b.Lines), out.String())
	}
}

// TestIdleBillWithoutTemplate: without a template the bill has the consumer alone.
func TestIdleBillWithoutTemplate(t *testing.T) {
	b := idleBill(nil, IdleResult{Usage: cost.Usage{Lambda: map[string]cost.LambdaUse{"consumer": {Invocations: 43_800}}}})
	for _, l := range b.Lines {
		if !strings.HasPrefix(l.Kind, "consumer") && l.Kind != "log storage" {
			t.Errorf("line %+v without a template", l)
		}
	}
}

// TestScaleBill: the idle environment of many lambdas prices each lambda's queues' polls and, in
// a configuration with alarms, its alarm metrics (P on its dead-letter queues, and four more),
// beside the consumer as measured.
func TestScaleBill(t *testing.T) {
	run := ScaleRun{Lambdas: 100, Priorities: 3, Shards: 4, ReadUnits: 300, InvocationMS: 100, DrainSQSCalls: 300, DrainMS: 3000, LogBytes: 400}
	line := func(b ScaleBill, kind string) float64 {
		t.Helper()
		for _, l := range b.Lines {
			if strings.HasPrefix(l.Kind, kind) {
				return l.USD
			}
		}
		t.Fatalf("no line %q in %+v", kind, b.Lines)
		return 0
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: $%.6f, want $%.6f", what, got, want)
		}
	}
	dev := scaleBill(run, "dev", environment{Shards: 4, LogRetentionDays: 7})
	near("polls of 300 queues", line(dev, "idle SQS polls"), 300*657_000*cost.SQSStandardPerMillion/1e6)
	near("reads", line(dev, "consumer reads"), 43_800*300*cost.DynamoDBReadPerMillion/1e6)
	near("dev's alarms", line(dev, "alarms"), 0)
	staging := scaleBill(run, "staging", environment{Shards: 4, LogRetentionDays: 30, NATGateways: 1, Alarms: &struct{}{}})
	near("staging's alarms", line(staging, "alarms"), (100*7+2)*CloudWatchAlarmPerMetricMonth)
	near("staging's NAT gateway", line(staging, "NAT gateways"), 730*(NATGatewayPerHour+PublicIPv4PerHour))
	if math.Abs(staging.PerLambda*100-staging.Total) > 1e-6 || staging.PerLambdaWithoutNAT >= staging.PerLambda {
		t.Errorf("staging per lambda $%.2f (without NAT $%.2f) of $%.2f", staging.PerLambda, staging.PerLambdaWithoutNAT, staging.Total)
	}
	var out bytes.Buffer
	staging.Print(&out)
	if !strings.Contains(out.String(), "| **per lambda** |") {
		t.Errorf("printed bill has no per-lambda line:\n%s", out.String())
	}
}

// TestIdleBillOverStacks: the bill reads the core template and the lambda stacks' beside it, and
// names each line's stack (logical ids repeat across stacks).
func TestIdleBillOverStacks(t *testing.T) {
	dir := t.TempDir()
	alarm := `{"Resources": {"A": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors", "Namespace": "AWS/Lambda"}}}}`
	for name, body := range map[string]string{"atf-dev": `{"Resources": {}}`, "atf-dev-batch": alarm, "atf-dev-platform": alarm, "atf-devx": alarm} {
		if err := os.WriteFile(filepath.Join(dir, name+".template.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env, err := loadStacks(filepath.Join(dir, "atf-dev.template.json"))
	if err != nil {
		t.Fatal(err)
	}
	var alarms []string
	for _, l := range idleBill(env, IdleResult{}).Lines {
		if l.Kind == "alarm" || strings.HasPrefix(l.Kind, "alarm") {
			alarms = append(alarms, l.Resource)
		}
	}
	if want := []string{"atf-dev-batch/A", "atf-dev-platform/A"}; !slices.Equal(alarms, want) {
		t.Errorf("alarm lines %v, want %v", alarms, want)
	}
}

// TestIdleBillContainerInsights: where the environment's cluster has Container Insights on, the
// bill prices the metrics of each service that runs tasks while idle (its own and its task
// family's) and the cluster's; executors that scale to zero add none, which a line of $0 says;
// with Container Insights off, no line.
func TestIdleBillContainerInsights(t *testing.T) {
	core := func(setting string) *template {
		tpl, err := parseTemplate([]byte(`{"Resources": {"Cluster": {"Type": "AWS::ECS::Cluster", "Properties":
		  {"ClusterSettings": [{"Name": "containerInsights", "Value": "` + setting + `"}]}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		tpl.name = "atf-dev"
		return tpl
	}
	services, err := parseTemplate([]byte(billFixture))
	if err != nil {
		t.Fatal(err)
	}
	services.name = "atf-dev-batch"
	idleOnly := &template{name: "atf-dev-batch", Resources: map[string]resource{}}
	for id, r := range services.Resources {
		if id != "Always" {
			idleOnly.Resources[id] = r
		}
	}
	lines := func(env stacks) map[string]float64 {
		got := map[string]float64{}
		for _, l := range idleBill(env, IdleResult{}).Lines {
			if l.Kind == "Container Insights metrics" {
				got[l.Resource] = l.USD
			}
		}
		return got
	}
	same := func(what string, got, want map[string]float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: lines %v, want %v", what, got, want)
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
				t.Errorf("%s: %s $%v, want $%v (present %v)", what, k, g, w, ok)
			}
		}
	}
	same("on, a service running while idle", lines(stacks{core("enabled"), services}), map[string]float64{
		"atf-dev-batch/Always": (ContainerInsightsServiceMetrics + ContainerInsightsTaskFamilyMetrics) * CloudWatchCustomMetricPerMonth,
		"atf-dev/Cluster":      ContainerInsightsClusterMetrics * CloudWatchCustomMetricPerMonth,
	})
	same("on, every service scaled to zero", lines(stacks{core("enabled"), idleOnly}), map[string]float64{"atf-dev/Cluster": 0})
	same("off", lines(stacks{core("disabled"), services}), map[string]float64{})
}

// TestIdleBillProvisionedTable: a table of provisioned capacity (CloudFormation's default when
// BillingMode is left out, as CDK leaves it) pays its capacity units and its indexes' every hour,
// idle or not; a table on demand pays nothing idle.
func TestIdleBillProvisionedTable(t *testing.T) {
	tpl, err := parseTemplate([]byte(`{"Resources": {
  "OnDemand": {"Type": "AWS::DynamoDB::Table", "Properties": {"BillingMode": "PAY_PER_REQUEST",
    "GlobalSecondaryIndexes": [{"IndexName": "due"}]}},
  "Provisioned": {"Type": "AWS::DynamoDB::Table", "Properties": {
    "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 10},
    "GlobalSecondaryIndexes": [
      {"IndexName": "due", "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 10}},
      {"IndexName": "list2", "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 10}}]}}
}}`))
	if err != nil {
		t.Fatal(err)
	}
	var lines []BillLine
	for _, l := range idleBill(stacks{tpl}, IdleResult{}).Lines {
		if l.Kind == "provisioned capacity" {
			lines = append(lines, l)
		}
	}
	want := (30*cost.DynamoDBWCUHour + 15*cost.DynamoDBRCUHour) * 730 // $15.66
	if len(lines) != 1 || lines[0].Resource != "Provisioned" || math.Abs(lines[0].USD-want) > 1e-9 {
		t.Errorf("lines %+v, want one of Provisioned at $%.4f", lines, want)
	}
}
