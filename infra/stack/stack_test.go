package stack

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/emf"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// TestNag: cdk-nag's AwsSolutions checks find no error that is not suppressed, in any
// environment; every suppression carries a reason (cdk-nag refuses one without).
func TestNag(t *testing.T) {
	for name, s := range environments(t) {
		for _, st := range s.stacks.All() {
			for _, e := range s.nagErrors(*st.StackName()) {
				t.Errorf("%s: %s: %s", name, *st.StackName(), e)
			}
		}
	}
}

// TestNagPlaced: cdk-nag finds no error either in stacks placed in an account and region (as
// the CLI places them with credentials), where ARNs carry the account and region themselves
// rather than pseudo parameters.
func TestNagPlaced(t *testing.T) {
	root := standIn(t)
	outdir := t.TempDir()
	st := New(newApp(outdir), Props{
		StackProps: awscdk.StackProps{Env: &awscdk.Environment{Account: jsii.String("123456789012"), Region: jsii.String("us-east-1")}},
		Name:       "dev", Env: mustEnvs(t)["dev"], Registry: mustLoadRegistry(t),
		Assets: filepath.Join(root, "bin", "lambda"), Root: root,
	})
	s := &synthesized{stacks: st, outdir: outdir}
	s.read()
	for _, stack := range st.All() {
		for _, e := range s.nagErrors(*stack.StackName()) {
			t.Errorf("%s: %s", *stack.StackName(), e)
		}
	}
}

// TestQueues: every lambda has a queue per priority, each with its dead-letter queue, named by
// sqsqueue, with sqsqueue's retention and redrive.
func TestQueues(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		queues := s.resources("AWS::SQS::Queue")
		want := 0
		byName := map[string]map[string]any{}
		for id, q := range queues {
			byName[props(q)["QueueName"].(string)] = q
			_ = id
		}
		for _, e := range reg.Lambdas {
			for _, p := range e.Priorities {
				want += 2
				qn, err := sqsqueue.QueueName("atf-"+name, e.Name, p)
				if err != nil {
					t.Fatal(err)
				}
				q, dlq := byName[qn], byName[sqsqueue.DLQName(qn)]
				if q == nil || dlq == nil {
					t.Errorf("%s: lambda %s priority %s: no queue %s or no %s", name, e.Name, p, qn, sqsqueue.DLQName(qn))
					continue
				}
				rp := props(q)["RedrivePolicy"].(map[string]any)
				if rp["maxReceiveCount"] != float64(sqsqueue.DefaultMaxReceiveCount) || !slices.Contains(refs(rp["deadLetterTargetArn"]), logicalID(s, dlq)) {
					t.Errorf("%s: %s: redrive policy %v", name, qn, rp)
				}
				if props(q)["MessageRetentionPeriod"] != sqsqueue.QueueRetention.Seconds() || props(dlq)["MessageRetentionPeriod"] != sqsqueue.DLQRetention.Seconds() {
					t.Errorf("%s: %s: retention %v, DLQ %v", name, qn, props(q)["MessageRetentionPeriod"], props(dlq)["MessageRetentionPeriod"])
				}
				if props(q)["SqsManagedSseEnabled"] != true {
					t.Errorf("%s: %s is not encrypted", name, qn)
				}
			}
		}
		if mustEnvs(t)[name].Events != nil {
			want++ // the example rule's queue (events_test.go)
		}
		if len(queues) != want {
			t.Errorf("%s: %d queues, want %d (lambdas × priorities, and a DLQ each; the events' example queue)", name, len(queues), want)
		}
		// Every queue refuses requests without TLS.
		secured := map[string]bool{}
		for _, qp := range s.resources("AWS::SQS::QueuePolicy") {
			doc, _ := json.Marshal(props(qp)["PolicyDocument"])
			if strings.Contains(string(doc), `"aws:SecureTransport":"false"`) && strings.Contains(string(doc), `"Effect":"Deny"`) {
				for _, r := range refs(props(qp)["Queues"]) {
					secured[r] = true
				}
			}
		}
		for id := range queues {
			if !secured[id] {
				t.Errorf("%s: queue %s has no policy denying requests without TLS", name, id)
			}
		}
	}
}

func logicalID(s *synthesized, r map[string]any) string {
	for id, x := range s.json["Resources"].(map[string]any) {
		if fmt.Sprint(x) == fmt.Sprint(r) {
			return id
		}
	}
	return ""
}

// TestWorkers: a function lambda's worker function has one event source per priority, each
// reporting batch item failures, with the priority's MaximumConcurrency and a batch no larger
// than the concurrency; its timeout is the lambda's plus sqsworker's margin, and its queues hide
// a message for at least 6 times that.
func TestWorkers(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		esms := s.resources("AWS::Lambda::EventSourceMapping")
		fns := s.resources("AWS::Lambda::Function")
		all := s.json["Resources"].(map[string]any)
		want := 0
		for _, e := range reg.Lambdas {
			if e.Kind != registry.KindFunction {
				continue
			}
			want += len(e.Priorities)
			for _, p := range e.Priorities {
				var found bool
				for _, m := range esms {
					q := all[ref(props(m)["EventSourceArn"])].(map[string]any)
					if path(q) != "Lambda-"+e.Name+"/Queues/Queue-"+p+"/Resource" {
						continue
					}
					found = true
					mp := props(m)
					if !slices.Equal(list(mp["FunctionResponseTypes"]), []any{"ReportBatchItemFailures"}) {
						t.Errorf("%s: %s/%s: FunctionResponseTypes %v", name, e.Name, p, mp["FunctionResponseTypes"])
					}
					if mc := mp["ScalingConfig"].(map[string]any)["MaximumConcurrency"]; mc != float64(e.Function.MaxConcurrency[p]) {
						t.Errorf("%s: %s/%s: MaximumConcurrency %v, want %d", name, e.Name, p, mc, e.Function.MaxConcurrency[p])
					}
					if bs := mp["BatchSize"].(float64); bs != float64(e.Function.BatchSize) || bs > float64(e.Concurrency) {
						t.Errorf("%s: %s/%s: BatchSize %v, want %d ≤ concurrency %d", name, e.Name, p, bs, e.Function.BatchSize, e.Concurrency)
					}
					fn := fns[ref(mp["FunctionName"])]
					if path(fn) != "Lambda-"+e.Name+"/Worker/Function/Resource" {
						t.Errorf("%s: %s/%s feeds %s", name, e.Name, p, path(fn))
					}
					timeout := props(fn)["Timeout"].(float64)
					if want := math.Ceil((e.Timeout + sqsworker.DefaultMargin).Seconds()); timeout != want || timeout > registry.MaxFunctionTimeout.Seconds() {
						t.Errorf("%s: %s: function timeout %v, want %v", name, e.Name, timeout, want)
					}
					if vis := props(q)["VisibilityTimeout"].(float64); vis < 6*timeout {
						t.Errorf("%s: %s/%s: visibility %v under 6 × %v", name, e.Name, p, vis, timeout)
					}
				}
				if !found {
					t.Errorf("%s: %s/%s: no event source mapping", name, e.Name, p)
				}
			}
		}
		if len(esms) != want {
			t.Errorf("%s: %d event source mappings, want %d", name, len(esms), want)
		}
	}
}

// TestEveryWorkerDeployed: every example lambda of functions/workers (the README's tour uses
// them all) has a worker function in the dev environment's templates, one that runs that
// handler's build: its code is the zip workers-<handler>.zip.
func TestEveryWorkerDeployed(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["dev"]
	dirs, err := filepath.Glob(filepath.Join("..", "..", "functions", "workers", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no workers in functions/workers: %v", err)
	}
	// The zip each function's code is: a file asset, staged in the cloud assembly under its hash.
	code := map[string]string{} // worker function's lambda -> the stand-in's content
	for _, fn := range s.resources("AWS::Lambda::Function") {
		p := path(fn)
		if !strings.HasSuffix(p, "/Worker/Function/Resource") {
			continue
		}
		key, _ := props(fn)["Code"].(map[string]any)["S3Key"].(string)
		z, err := zip.OpenReader(filepath.Join(s.outdir, "asset."+key))
		if err != nil {
			t.Fatalf("%s: code %s: %v", p, key, err)
		}
		b, err := fs.ReadFile(z, "bootstrap")
		z.Close()
		if err != nil {
			t.Fatalf("%s: code %s: %v", p, key, err)
		}
		code[strings.TrimPrefix(strings.Split(p, "/")[0], "Lambda-")] = string(b)
	}
	for _, dir := range dirs {
		w := filepath.Base(dir)
		var deployed []string
		for _, e := range reg.Lambdas {
			if e.Handler == w && e.Program == "" && code[e.Name] == "stand-in workers-"+w {
				deployed = append(deployed, e.Name)
			}
		}
		if len(deployed) == 0 {
			t.Errorf("functions/workers/%s: no worker function of dev runs it: give it an entry in lambdas.json", w)
		}
	}
}

// TestFunctions: every function runs provided.al2023 on arm64 and gets the environment of
// package awsfn; a lambda's worker and status function get their own lambda only, and the
// worker its own status function's name. The functions that serve every lambda (the API, the
// consumer) get the path of the lambda stacks' parameters instead.
func TestFunctions(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["prod"]
	for id, fn := range s.resources("AWS::Lambda::Function") {
		p := props(fn)
		if p["Runtime"] != "provided.al2023" || !slices.Equal(list(p["Architectures"]), []any{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v, architectures %v, handler %v", id, p["Runtime"], p["Architectures"], p["Handler"])
		}
		env := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env[awsfn.EnvQueuePrefix] != "atf-prod" || env[awsfn.EnvShards] != "16" || env[awsfn.EnvTable] == nil {
			t.Errorf("%s: environment %v", id, env)
		}
		var statusPath string // of the function ATF_STATUS_FUNCTION names
		if statusFn, ok := s.json["Resources"].(map[string]any)[ref(env[awsfn.EnvStatusFunction])].(map[string]any); ok {
			statusPath = path(statusFn)
		}
		switch path := path(fn); {
		case strings.HasPrefix(path, "Lambda-"):
			lambda := strings.TrimPrefix(strings.Split(path, "/")[0], "Lambda-")
			own, _ := reg.LambdasJSON(lambda)
			if env[awsfn.EnvLambda] != lambda || env[awsfn.EnvLambdas] != own {
				t.Errorf("%s: environment %v", path, env)
			}
			if strings.HasSuffix(path, "/Worker/Function/Resource") {
				if statusPath != "Lambda-"+lambda+"/Status/Function/Resource" {
					t.Errorf("%s: %s = %v, want its own lambda's status function", path, awsfn.EnvStatusFunction, env[awsfn.EnvStatusFunction])
				}
			}
		default:
			if env[awsfn.EnvLambdas] != nil || env[awsfn.EnvLambdasPath] != awsfn.LambdasPath("prod") {
				t.Errorf("%s: %s = %v and %s = %v, want no %s and %s", path, awsfn.EnvLambdas, env[awsfn.EnvLambdas],
					awsfn.EnvLambdasPath, env[awsfn.EnvLambdasPath], awsfn.EnvLambdas, awsfn.LambdasPath("prod"))
			}
		}
	}
}

// TestAPI: the API is an HTTP API (no REST API): every route authorizes with AWS_IAM and has
// the lambda in its path (but the contract's, GET /v1/openapi.json, and the failed tasks of every
// lambda, GET /v1/tasks, which a policy of one lambda's paths does not allow); the function gets payload format 1.0 (the REST proxy event apifn
// reads); the $default stage throttles every route and writes access logs.
func TestAPI(t *testing.T) {
	for name, s := range environments(t) {
		if n := len(s.resources("AWS::ApiGateway::RestApi")); n != 0 {
			t.Errorf("%s: %d REST APIs, want none", name, n)
		}
		routes := s.resources("AWS::ApiGatewayV2::Route")
		if len(routes) != len(apiRoutes) {
			t.Errorf("%s: %d routes, want %d", name, len(routes), len(apiRoutes))
		}
		var keys []string
		for _, r := range routes {
			p := props(r)
			if a := p["AuthorizationType"]; a != "AWS_IAM" {
				t.Errorf("%s: route %v: authorization %v, want AWS_IAM", name, p["RouteKey"], a)
			}
			key, _ := p["RouteKey"].(string)
			if _, path, _ := strings.Cut(key, " "); !strings.HasPrefix(path, "/v1/lambdas") && path != "/v1/openapi.json" && path != "/v1/tasks" {
				t.Errorf("%s: route %s outside /v1/lambdas", name, key)
			}
			keys = append(keys, key)
		}
		for _, want := range apiRoutes {
			if !slices.Contains(keys, want.method+" "+want.path) {
				t.Errorf("%s: no route %s %s in %v", name, want.method, want.path, keys)
			}
		}
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Integration"), map[string]any{
			"IntegrationType": "AWS_PROXY", "PayloadFormatVersion": "1.0",
		})
		if n := len(s.resources("AWS::ApiGatewayV2::Integration")); n != 1 {
			t.Errorf("%s: %d integrations, want 1", name, n)
		}
		env := mustEnvs(t)[name]
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), map[string]any{
			"StageName":  apiStage,
			"AutoDeploy": true,
			"DefaultRouteSettings": assertions.Match_ObjectLike(&map[string]any{
				"ThrottlingRateLimit": env.API.RateLimit, "ThrottlingBurstLimit": env.API.BurstLimit,
			}),
			"AccessLogSettings": assertions.Match_ObjectLike(&map[string]any{
				"DestinationArn": assertions.Match_AnyValue(), "Format": accessLogFormat,
			}),
		})
	}
}

func mustEnvs(t *testing.T) map[string]Environment {
	envs, err := LoadEnvironments(envsPath)
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// dataActionPrefixes are the services whose actions read or change data.
var dataActionPrefixes = []string{"dynamodb:", "sqs:", "lambda:", "s3:", "sns:", "kms:", "logs:", "ecs:", "secretsmanager:", "ssm:", "*"}

// TestNoDataActionOnWildcard: no IAM policy allows a data action on Resource "*". The one
// action on "*" is ecr:GetAuthorizationToken, which has no resource-level permissions.
func TestNoDataActionOnWildcard(t *testing.T) {
	for name, s := range environments(t) {
		for id, st := range statements(s) {
			for _, r := range list(st["Resource"]) {
				if r != "*" {
					continue
				}
				for _, a := range list(st["Action"]) {
					a := a.(string)
					if a == "ecr:GetAuthorizationToken" {
						continue
					}
					if slices.ContainsFunc(dataActionPrefixes, func(p string) bool { return strings.HasPrefix(a, p) }) || strings.Contains(a, "*") {
						t.Errorf("%s: %s allows %s on *", name, id, a)
					}
				}
			}
		}
	}
}

// statements returns the Allow statements of every IAM policy of s, by policy logical id.
func statements(s *synthesized) map[string]map[string]any {
	out := map[string]map[string]any{}
	add := func(id string, doc any) {
		for i, st := range list(doc.(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			if st["Effect"] == "Allow" {
				out[fmt.Sprintf("%s[%d]", id, i)] = st
			}
		}
	}
	for id, p := range s.resources("AWS::IAM::Policy") {
		add(id, props(p)["PolicyDocument"])
	}
	for id, p := range s.resources("AWS::IAM::ManagedPolicy") {
		add(id, props(p)["PolicyDocument"])
	}
	for id, r := range s.resources("AWS::IAM::Role") {
		for _, p := range list(props(r)["Policies"]) {
			if p != nil {
				add(id, p.(map[string]any)["PolicyDocument"])
			}
		}
	}
	return out
}

// grantsOf returns, for the role at construct path rolePath, every action it is allowed and the
// logical ids of the resources it may touch.
func grantsOf(s *synthesized, rolePath string) (actions []string, resources []string) {
	all := s.json["Resources"].(map[string]any)
	for _, p := range s.resources("AWS::IAM::Policy") {
		attached := false
		for _, r := range refs(props(p)["Roles"]) {
			if pathOf(all, r) == rolePath {
				attached = true
			}
		}
		if !attached {
			continue
		}
		for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			for _, a := range list(st["Action"]) {
				actions = append(actions, a.(string))
			}
			for _, r := range refs(st["Resource"]) {
				resources = append(resources, pathOf(all, r))
			}
		}
	}
	slices.Sort(actions)
	slices.Sort(resources)
	return slices.Compact(actions), slices.Compact(resources)
}

// TestLeastPrivilege: each role touches only its own resources. A worker receives from its own
// queues and invokes its own status function, no other lambda's queues, no table; an executor
// consumes its own queues and uses the table; the consumer sends to every queue and receives
// from none; the API function uses the table and sends to every queue; a status function uses the
// table and sends to its own lambda's queues. Which items of the
// table, isolation_test.go checks.
func TestLeastPrivilege(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["staging"]
	for _, e := range reg.Lambdas {
		var role string
		want := []string{}
		for _, p := range e.Priorities {
			want = append(want, "Lambda-"+e.Name+"/Queues/Queue-"+p+"/Resource")
		}
		switch e.Kind {
		case registry.KindFunction:
			role = "Lambda-" + e.Name + "/Worker/Role/Resource"
			want = append(want, "Lambda-"+e.Name+"/Worker/Logs/Resource", "Lambda-"+e.Name+"/Status/Function/Resource")
		case registry.KindECS:
			role = "Lambda-" + e.Name + "/Executor/Task/TaskRole/Resource"
			want = append(want, "Store/Table/Resource", eventBusPath) // staging publishes lifecycle events (events_test.go)
		}
		actions, resources := grantsOf(s, role)
		slices.Sort(want)
		if !slices.Equal(resources, want) {
			t.Errorf("%s may touch %v\nwant %v", role, resources, want)
		}
		for _, a := range actions {
			if !strings.HasPrefix(a, "sqs:") && !strings.HasPrefix(a, "logs:") && a != "lambda:InvokeFunction" && !slices.Contains(statusActions, a) && !slices.Contains(upstreamReadActions, a) && (a != putEvents || e.Kind != registry.KindECS) {
				t.Errorf("%s may %s", role, a)
			}
			if a == "sqs:SendMessage" && e.Kind == registry.KindFunction {
				t.Errorf("%s may send messages", role) // an ECS executor sends retries due soon
			}
		}
	}
	// The consumer receives and deletes on the dead-letter queues alone (TestConsumerDrainGrants).
	actions, resources := grantsOf(s, "Consumer/Role/Resource")
	for _, r := range resources {
		if strings.HasPrefix(r, "Lambda-") && !strings.Contains(r, "/Queues/Queue-") && !strings.Contains(r, "/Queues/Dlq-") {
			t.Errorf("the consumer may touch %s", r)
		}
	}
	for _, a := range actions {
		if strings.HasPrefix(a, "lambda:") {
			t.Errorf("the consumer may %s", a)
		}
	}
	// Periodic schedules: a firing creates its task (PutItem) and advances its schedule.
	if !slices.Contains(actions, "dynamodb:PutItem") {
		t.Errorf("the consumer may not PutItem: schedules cannot fire")
	}
	// The API function sends the tasks due within 15 minutes to their queues: it may send to
	// every lambda's queues, and receive or delete nothing.
	actions, resources = grantsOf(s, "ApiFunction/Role/Resource")
	for _, r := range resources {
		if strings.Contains(r, "/Dlq-") || strings.HasPrefix(r, "Lambda-") && !strings.Contains(r, "/Queues/Queue-") {
			t.Errorf("the API function may touch %s", r)
		}
	}
	for _, a := range actions {
		sends := a == "sqs:SendMessage" || a == "sqs:GetQueueUrl" || a == "sqs:GetQueueAttributes"
		readsLambdas := slices.Contains(lambdasPathActions, a) || slices.Contains(lambdasParameterActions, a)
		if !sends && !readsLambdas && !strings.HasPrefix(a, "logs:") && !slices.Contains(apiActions, a) && a != putEvents {
			t.Errorf("the API function may %s", a)
		}
	}
	// A status function uses the table, and sends retries due soon to its own lambda's queues.
	for _, e := range reg.Lambdas {
		if e.Kind != registry.KindFunction {
			continue
		}
		role := "Lambda-" + e.Name + "/Status/Role/Resource"
		allowed := append(slices.Clone(statusActions), upstreamReadActions...)
		allowed = append(allowed, "sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes", putEvents)
		want := []string{eventBusPath, "Lambda-" + e.Name + "/Status/Logs/Resource", "Store/Table/Resource"}
		for _, p := range e.Priorities {
			want = append(want, "Lambda-"+e.Name+"/Queues/Queue-"+p+"/Resource")
		}
		slices.Sort(want)
		actions, resources := grantsOf(s, role)
		if !slices.Equal(resources, want) {
			t.Errorf("%s may touch %v, want %v", role, resources, want)
		}
		for _, a := range actions {
			if !strings.HasPrefix(a, "logs:") && !slices.Contains(allowed, a) {
				t.Errorf("%s may %s", role, a)
			}
		}
	}
}

// TestStore: the table is dynamostore.TableInput's: keys, the due, list and failed indexes with their
// projections; TTL on "expires"; capacity mode (TestTableCapacity), PITR, deletion protection and
// retention as each environment says.
func TestStore(t *testing.T) {
	envs := mustEnvs(t)
	for name, s := range environments(t) {
		in := dynamostore.TableInput("atf-" + name)
		var gsis []any
		for _, g := range in.GlobalSecondaryIndexes {
			pk, sk := keys(g.KeySchema)
			projection := map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": g.Projection.NonKeyAttributes}
			if g.Projection.ProjectionType == "KEYS_ONLY" {
				projection = map[string]any{"ProjectionType": "KEYS_ONLY"}
			}
			gsis = append(gsis, map[string]any{
				"IndexName":  *g.IndexName,
				"KeySchema":  []any{map[string]any{"AttributeName": pk, "KeyType": "HASH"}, map[string]any{"AttributeName": sk, "KeyType": "RANGE"}},
				"Projection": projection,
			})
		}
		e := envs[name]
		billing := any("PAY_PER_REQUEST")
		if e.provisioned() != nil {
			billing = assertions.Match_Absent() // CloudFormation's default, PROVISIONED, which CDK leaves out
		}
		s.template.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"Properties": map[string]any{
				"TableName":                        "atf-" + name,
				"BillingMode":                      billing,
				"KeySchema":                        []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}, map[string]any{"AttributeName": "sk", "KeyType": "RANGE"}},
				"GlobalSecondaryIndexes":           gsis,
				"TimeToLiveSpecification":          map[string]any{"AttributeName": dynamostore.TTLAttribute, "Enabled": true},
				"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": e.PITR},
				"DeletionProtectionEnabled":        e.Retain,
			},
			"DeletionPolicy": map[bool]string{true: "Retain", false: "Delete"}[e.Retain],
		})
	}
	// The due index by name, as the issue asks, and the failed one, keys only.
	environments(t)["dev"].template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"GlobalSecondaryIndexes": assertions.Match_ArrayWith(&[]any{
			assertions.Match_ObjectLike(&map[string]any{"IndexName": dynamostore.DueIndex}),
			assertions.Match_ObjectLike(&map[string]any{"IndexName": dynamostore.FailedIndex, "Projection": map[string]any{"ProjectionType": "KEYS_ONLY"}}),
		}),
	})
}

// TestConsumer: an EventBridge rule starts the consumer every minute; one invocation at a time
// where the environment reserves concurrency, no retries of stale events; it gets no more time than a minute and a half.
func TestConsumer(t *testing.T) {
	s := environments(t)["dev"]
	s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), map[string]any{
		"ScheduleExpression": "rate(1 minute)", "State": "ENABLED",
		"Targets": []any{assertions.Match_ObjectLike(&map[string]any{"RetryPolicy": map[string]any{"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}})},
	})
	var consumer map[string]any
	for _, fn := range s.resources("AWS::Lambda::Function") {
		if path(fn) == "Consumer/Function/Resource" {
			consumer = fn
		}
	}
	if consumer == nil {
		t.Fatal("no consumer function")
	}
	// dev reserves nothing (reserved_concurrency false): the consumer is not held to one.
	if p := props(consumer); p["ReservedConcurrentExecutions"] != nil || p["Timeout"] != consumerTimeout.Seconds() {
		t.Errorf("consumer: reserved concurrency %v, timeout %v", p["ReservedConcurrentExecutions"], p["Timeout"])
	}
	for _, fn := range environments(t)["staging"].resources("AWS::Lambda::Function") {
		if path(fn) == "Consumer/Function/Resource" && props(fn)["ReservedConcurrentExecutions"] != 1.0 {
			t.Errorf("staging's consumer: reserved concurrency %v, want 1", props(fn)["ReservedConcurrentExecutions"])
		}
	}
	// Lambda's smallest memory: the idle environment pays for it every minute.
	if p := props(consumer); p["MemorySize"] != 128.0 {
		t.Errorf("consumer: memory %v MB, want 128", p["MemorySize"])
	}
	s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventInvokeConfig"), map[string]any{
		"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60,
	})
}

// TestNetworkCosts: dev deploys no NAT gateway and no interface endpoint by default; its
// executors run in public subnets with an address each, in a security group that admits nothing.
// prod keeps private subnets behind its NAT gateways. No environment has an interface endpoint.
func TestNetworkCosts(t *testing.T) {
	envs := environments(t)
	if mustEnvs(t)["dev"].NATGateways != 0 {
		t.Errorf("dev's nat_gateways is %d, want 0", mustEnvs(t)["dev"].NATGateways)
	}
	var env Environment
	must(json.Unmarshal([]byte(`{}`), &env))
	if env.NATGateways != 0 {
		t.Errorf("an environment that leaves nat_gateways out gets %d, want 0", env.NATGateways)
	}
	for name, s := range envs {
		want := mustEnvs(t)[name].NATGateways
		if n := len(s.resources("AWS::EC2::NatGateway")); n != want {
			t.Errorf("%s: %d NAT gateways, want %d", name, n, want)
		}
		for _, ep := range s.resources("AWS::EC2::VPCEndpoint") {
			if typ := props(ep)["VpcEndpointType"]; typ != nil && typ != "Gateway" {
				t.Errorf("%s: endpoint %s is of type %v: only gateway endpoints, which are free", name, path(ep), typ)
			}
		}
		publicIP := "DISABLED"
		if want == 0 {
			publicIP = "ENABLED"
			if n := len(s.resources("AWS::EC2::EIP")); n != 0 {
				t.Errorf("%s: %d elastic IPs, want none", name, n)
			}
		}
		for _, svc := range s.resources("AWS::ECS::Service") {
			if got := props(svc)["NetworkConfiguration"].(map[string]any)["AwsvpcConfiguration"].(map[string]any)["AssignPublicIp"]; got != publicIP {
				t.Errorf("%s: %s: AssignPublicIp %v, want %s", name, path(svc), got, publicIP)
			}
		}
		for _, sg := range s.resources("AWS::EC2::SecurityGroup") {
			if in := props(sg)["SecurityGroupIngress"]; in != nil {
				t.Errorf("%s: security group %s admits %v", name, path(sg), in)
			}
		}
		if n := len(s.resources("AWS::EC2::SecurityGroupIngress")); n != 0 {
			t.Errorf("%s: %d ingress rules, want none", name, n)
		}
	}
}

// TestContainerInsights: the executors' cluster has Container Insights as its environment sets
// it: off in dev (and where the field is left out), on in staging and prod.
func TestContainerInsights(t *testing.T) {
	envs := mustEnvs(t)
	if envs["dev"].ContainerInsights || !envs["staging"].ContainerInsights || !envs["prod"].ContainerInsights {
		t.Errorf("container_insights: dev %v, staging %v, prod %v; want off, on, on",
			envs["dev"].ContainerInsights, envs["staging"].ContainerInsights, envs["prod"].ContainerInsights)
	}
	var env Environment
	must(json.Unmarshal([]byte(`{}`), &env))
	if env.ContainerInsights {
		t.Error("an environment that leaves container_insights out has it on")
	}
	for name, s := range environments(t) {
		want := "disabled"
		if envs[name].ContainerInsights {
			want = "enabled"
		}
		clusters := s.resources("AWS::ECS::Cluster")
		if len(clusters) != 1 {
			t.Fatalf("%s: %d clusters, want 1", name, len(clusters))
		}
		for _, c := range clusters {
			settings := list(props(c)["ClusterSettings"])
			if len(settings) != 1 || settings[0].(map[string]any)["Name"] != "containerInsights" || settings[0].(map[string]any)["Value"] != want {
				t.Errorf("%s: cluster settings %v, want containerInsights %s", name, settings, want)
			}
		}
	}
}

// TestExecutorsScaleToZero: an ecs lambda's service scales between 0 and its registry tasks on
// its queues' depth: out when messages are visible, in to zero after the lambda's timeout (plus
// scaleInMargin) with no message visible, delayed or deleted (claimed), each policy with a
// cooldown. (TestExecutorsDoNotFlap replays these rules.)
func TestExecutorsScaleToZero(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		targets := s.resources("AWS::ApplicationAutoScaling::ScalableTarget")
		alarms := s.resources("AWS::CloudWatch::Alarm")
		policies := s.resources("AWS::ApplicationAutoScaling::ScalingPolicy")
		for _, e := range reg.Lambdas {
			if e.Kind != registry.KindECS {
				continue
			}
			prefix := "Lambda-" + e.Name + "/Executor/"
			var target map[string]any
			for _, tg := range targets {
				if strings.HasPrefix(path(tg), prefix) {
					target = props(tg)
				}
			}
			if target == nil {
				t.Errorf("%s: %s: no scalable target", name, e.Name)
				continue
			}
			if target["MinCapacity"] != 0.0 || target["MaxCapacity"] != float64(e.ECS.Tasks) || target["ScalableDimension"] != "ecs:service:DesiredCount" {
				t.Errorf("%s: %s: scalable target %v, want 0..%d tasks", name, e.Name, target, e.ECS.Tasks)
			}
			for _, svc := range s.resources("AWS::ECS::Service") {
				if strings.HasPrefix(path(svc), prefix) && props(svc)["DesiredCount"] != nil {
					t.Errorf("%s: %s: DesiredCount %v set: a deployment would reset what scaling set", name, e.Name, props(svc)["DesiredCount"])
				}
			}
			// The alarms, by the SQS metrics they sum over the lambda's queues.
			byMetrics := map[string]map[string]any{}
			for _, a := range alarms {
				if !strings.HasPrefix(path(a), prefix) {
					continue
				}
				var names []string
				for _, m := range list(props(a)["Metrics"]) {
					if ms, ok := m.(map[string]any)["MetricStat"].(map[string]any); ok {
						metric := ms["Metric"].(map[string]any)
						if metric["Namespace"] != "AWS/SQS" {
							t.Errorf("%s: %s: alarm %s on %v", name, e.Name, path(a), metric)
						}
						names = append(names, metric["MetricName"].(string))
					}
				}
				slices.Sort(names)
				byMetrics[strings.Join(slices.Compact(names), ",")] = props(a)
			}
			window, _ := scaleInWindow(e)
			out := byMetrics["ApproximateNumberOfMessagesVisible"]
			in := byMetrics["ApproximateNumberOfMessagesDelayed,ApproximateNumberOfMessagesVisible,NumberOfMessagesDeleted"]
			switch {
			case out == nil || in == nil:
				t.Errorf("%s: %s: alarms on %v, want one on the visible messages and one on those visible, delayed and deleted", name, e.Name, slices.Collect(maps.Keys(byMetrics)))
			case out["Threshold"] != 1.0 || out["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || len(list(out["Metrics"])) != len(e.Priorities)+1:
				t.Errorf("%s: %s: scale-out alarm %v, want at least 1 message visible over its %d queues", name, e.Name, out, len(e.Priorities))
			case in["Threshold"] != 0.0 || in["ComparisonOperator"] != "LessThanOrEqualToThreshold" || in["EvaluationPeriods"] != window.Minutes() || in["DatapointsToAlarm"] != window.Minutes():
				t.Errorf("%s: %s: scale-in alarm %v, want nothing visible, delayed or deleted for %s", name, e.Name, in, window)
			}
			for _, a := range []map[string]any{out, in} {
				if a != nil && len(refs(a["AlarmActions"])) != 1 {
					t.Errorf("%s: %s: alarm actions %v, want its scaling policy", name, e.Name, a["AlarmActions"])
				}
			}
			var adjustments []string
			for _, pol := range policies {
				if strings.HasPrefix(path(pol), prefix) {
					c := props(pol)["StepScalingPolicyConfiguration"].(map[string]any)
					adjustments = append(adjustments, c["AdjustmentType"].(string))
					if cd, _ := c["Cooldown"].(float64); cd <= 0 {
						t.Errorf("%s: %s: scaling policy %s has no cooldown", name, e.Name, path(pol))
					}
					if c["AdjustmentType"] == "ExactCapacity" && list(c["StepAdjustments"])[0].(map[string]any)["ScalingAdjustment"] != 0.0 {
						t.Errorf("%s: %s: scale-in %v, want to 0", name, e.Name, c)
					}
				}
			}
			slices.Sort(adjustments)
			if !slices.Equal(adjustments, []string{"ChangeInCapacity", "ExactCapacity"}) {
				t.Errorf("%s: %s: scaling policies %v, want a change in capacity out and to exact 0 in", name, e.Name, adjustments)
			}
		}
	}
}

// TestExecutorsTooLongToScale: a lambda whose runs outlast what a CloudWatch alarm can watch,
// or whose queues are more than an alarm can sum, keeps a fixed count of executors rather than
// stopping them mid-task.
func TestExecutorsTooLongToScale(t *testing.T) {
	three := task.DefaultPriorities
	if _, ok := scaleInWindow(registry.Entry{Timeout: 2 * time.Hour, Priorities: three}); !ok {
		t.Error("a 2h lambda does not scale")
	}
	if w, ok := scaleInWindow(registry.Entry{Timeout: 30 * time.Second, Priorities: three}); !ok || w != 6*time.Minute {
		t.Errorf("a 30s lambda: window %s, %v; want 6m (whole minutes, rounded up)", w, ok)
	}
	if _, ok := scaleInWindow(registry.Entry{Timeout: 24 * time.Hour, Priorities: three}); ok {
		t.Error("a 24h lambda scales: its scale-in alarm would watch more than a day")
	}
	if _, ok := scaleInWindow(registry.Entry{Timeout: time.Minute, Priorities: []string{"a", "b", "c", "d"}}); ok {
		t.Error("a lambda of 4 priorities scales: its scale-in alarm would sum 12 metrics, over CloudWatch's 10")
	}
}

// TestExecutors: an ecs lambda runs as a Fargate service on arm64 with its image built from
// infra/executor/Dockerfile, given time to drain on SIGTERM, logging to CloudWatch Logs.
func TestExecutors(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["prod"]
	var want int
	for _, e := range reg.Lambdas {
		if e.Kind != registry.KindECS {
			continue
		}
		want++
		tpl := s.templateOf(e)
		tpl.HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"Cpu": fmt.Sprint(e.ECS.CPU), "Memory": fmt.Sprint(e.ECS.MemoryMB),
			"RuntimePlatform": map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"StopTimeout":     executorStopTimeout.Seconds(),
				"LinuxParameters": map[string]any{"InitProcessEnabled": true},
				// Its logs, and its handler's output, go to CloudWatch Logs, in a stream per ECS
				// task named after the lambda, which the executor reads back from the task
				// metadata endpoint for its attempts' log_location.
				"LogConfiguration": map[string]any{
					"LogDriver": "awslogs",
					"Options": assertions.Match_ObjectLike(&map[string]any{
						"awslogs-group": assertions.Match_AnyValue(), "awslogs-stream-prefix": e.Name,
					}),
				},
				"Environment": assertions.Match_ArrayWith(&[]any{
					map[string]any{"Name": awsfn.EnvLambda, "Value": e.Name},
				}),
			})},
		})
		tpl.HasResourceProperties(jsii.String("AWS::ECS::Service"), map[string]any{"LaunchType": "FARGATE"})
	}
	if n := len(s.resources("AWS::ECS::Service")); n != want {
		t.Errorf("%d ECS services, want %d", n, want)
	}
	// The image asset stages the Dockerfile, the executor's binary and the handler (a Go
	// handler's build, or a program), built for arm64 on the entry's base image.
	var assets struct {
		DockerImages map[string]struct {
			Source struct {
				Directory, DockerFile, Platform string
				DockerBuildArgs                 map[string]string
			}
		}
	}
	for _, st := range s.stacks.All() {
		manifest, err := os.ReadFile(filepath.Join(s.outdir, *st.ArtifactId()+".assets.json"))
		if err != nil {
			t.Fatal(err)
		}
		must(json.Unmarshal(manifest, &assets)) // adds this stack's images to the map
	}
	if len(assets.DockerImages) != want {
		t.Fatalf("%d image assets, want %d", len(assets.DockerImages), want)
	}
	images := map[string]bool{} // by lambda
	for _, img := range assets.DockerImages {
		args := img.Source.DockerBuildArgs
		e, ok := reg.Lambda(args["LAMBDA"])
		if img.Source.DockerFile != dockerfile || img.Source.Platform != "linux/arm64" || !ok || args["BASE"] != e.ECS.Image {
			t.Errorf("image asset %+v", img.Source)
			continue
		}
		images[e.Name] = true
		handler := "bin/lambda/workers-" + e.Handler + "/bootstrap"
		if e.Program != "" {
			handler = e.Program
		}
		if args["HANDLER_FILE"] != handler {
			t.Errorf("%s: the image carries %s, want %s", e.Name, args["HANDLER_FILE"], handler)
		}
		staged := filepath.Join(s.outdir, img.Source.Directory)
		var files []string
		must(filepath.Walk(staged, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				rel, _ := filepath.Rel(staged, p)
				files = append(files, rel)
			}
			return err
		}))
		slices.Sort(files)
		wantFiles := []string{"bin/lambda/executor/bootstrap", handler, dockerfile}
		slices.Sort(wantFiles)
		if !slices.Equal(files, wantFiles) {
			t.Errorf("%s: the image's context holds %v, want %v", e.Name, files, wantFiles)
		}
		if info, err := os.Stat(filepath.Join(staged, handler)); err != nil || info.Mode()&0o111 == 0 {
			t.Errorf("%s: the staged handler %s is not executable: %v", e.Name, handler, err)
		}
	}
	if len(images) != want {
		t.Errorf("images of %v, want one for each of the %d ecs lambdas", images, want)
	}
}

// TestEnvironmentsDiffer: prod keeps its data and logs, has PITR and alarms; dev has neither.
func TestEnvironmentsDiffer(t *testing.T) {
	envs := environments(t)
	reg := mustLoadRegistry(t)
	retention := func(s *synthesized) map[any]int {
		out := map[any]int{}
		for _, lg := range s.resources("AWS::Logs::LogGroup") {
			out[props(lg)["RetentionInDays"]]++
		}
		return out
	}
	if r := retention(envs["prod"]); len(r) != 1 || r[365.0] == 0 {
		t.Errorf("prod log retention %v, want 365 days everywhere", r)
	}
	if r := retention(envs["dev"]); len(r) != 1 || r[7.0] == 0 {
		t.Errorf("dev log retention %v, want 7 days everywhere", r)
	}
	for _, lg := range envs["prod"].resources("AWS::Logs::LogGroup") {
		if lg["DeletionPolicy"] != "Retain" {
			t.Errorf("prod: log group %s is not retained", path(lg))
		}
	}
	// Alarms that notify; the executors' scaling alarms act on their services instead.
	notifying := func(s *synthesized) []map[string]any {
		var out []map[string]any
		for _, a := range s.resources("AWS::CloudWatch::Alarm") {
			if !strings.Contains(path(a), "/Executor/Scaling/") {
				out = append(out, a)
			}
		}
		return out
	}
	if n := len(notifying(envs["dev"])); n != 0 {
		t.Errorf("dev has %d alarms, want none", n)
	}
	// prod: per lambda, dead-letter messages, dead tasks and delivery p95, and for a function
	// lambda its status function's throttles and errors; consumer errors and table errors.
	functions := 0
	for _, e := range reg.Lambdas {
		if e.Kind == registry.KindFunction {
			functions++
		}
	}
	alarms := notifying(envs["prod"])
	if want := 3*len(reg.Lambdas) + 2*functions + 2; len(alarms) != want {
		t.Errorf("prod has %d alarms, want %d", len(alarms), want)
	}
	topics := envs["prod"].resources("AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("prod has %d topics, want 1", len(topics))
	}
	for _, a := range alarms {
		// The core's topic: by reference in the core, by its name in a lambda stack.
		if to := refs(props(a)["AlarmActions"]); len(to) != 1 || pathOf(envs["prod"].json["Resources"].(map[string]any), to[0]) != "Alarms/Topic/Resource" {
			t.Errorf("prod: alarm %s notifies %v", path(a), props(a)["AlarmActions"])
		}
	}
	for _, e := range reg.Lambdas {
		envs["prod"].templateOf(e).HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName": metricDeliveryLatency, "Namespace": "atf/prod", "ExtendedStatistic": "p95",
			"Threshold": mustEnvs(t)["prod"].Alarms.DeliveryP95Ms, "Dimensions": []any{map[string]any{"Name": "Lambda", "Value": e.Name}},
		})
	}
	// The custom metrics are the functions' EMF metrics: dead tasks are the dead lifecycle events,
	// and the table's errors are one metric without dimensions; no log metric filter is left.
	for _, e := range reg.Lambdas {
		envs["prod"].templateOf(e).HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName": emf.TaskEvents, "Namespace": "atf/prod", "Statistic": "Sum",
			"Threshold": mustEnvs(t)["prod"].Alarms.DeadTasks,
			"Dimensions": assertions.Match_ArrayEquals(&[]any{
				map[string]any{"Name": "Event", "Value": "dead"}, map[string]any{"Name": "Lambda", "Value": e.Name},
			}),
		})
	}
	envs["prod"].template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"MetricName": emf.StoreErrors, "Namespace": "atf/prod", "Statistic": "Sum", "Threshold": 1,
		"Dimensions": assertions.Match_Absent(),
	})
	for name, env := range envs {
		if n := len(env.resources("AWS::Logs::MetricFilter")); n != 0 {
			t.Errorf("%s has %d metric filters, want none: the metrics are EMF", name, n)
		}
	}
	// The core's, and one per lambda stack.
	if n := len(envs["prod"].resources("AWS::CloudWatch::Dashboard")); n != 1+len(reg.Stacks()) {
		t.Errorf("prod has %d dashboards, want %d", n, 1+len(reg.Stacks()))
	}
}

// TestAddLambda: one more registry entry in an existing team makes exactly that lambda's
// resources (its queues, its worker, its alarms) in its team's stack, where only its stack's
// parameter and dashboard change besides; every other stack, the core's included, is
// byte-identical.
func TestAddLambda(t *testing.T) {
	before := environments(t)
	raw, err := os.ReadFile(registryPath)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string][]map[string]any
	must(json.Unmarshal(raw, &file))
	file["lambdas"] = append(file["lambdas"], map[string]any{"name": "newbie", "team": "platform", "handler": "echo", "priorities": []string{"urgent", "later"}, "timeout": "20s"})
	b, _ := json.Marshal(file)
	copyPath := filepath.Join(t.TempDir(), registry.File)
	must(os.WriteFile(copyPath, b, 0o644))
	reg, err := registry.Load(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	envs := mustEnvs(t)
	after := synth(t, map[string]Environment{"prod": envs["prod"]}, reg)["prod"]
	old, new := before["prod"].json["Resources"].(map[string]any), after.json["Resources"].(map[string]any)

	added := map[string]int{}
	for id, r := range new {
		r := r.(map[string]any)
		if _, ok := old[id]; ok {
			continue
		}
		if p := path(r); !strings.HasPrefix(p, "Lambda-newbie/") {
			t.Errorf("added %s (%s), not of the new lambda", id, p)
		}
		if st := after.stackOf(id); st != "atf-prod-platform" {
			t.Errorf("added %s in %s, want its team's stack atf-prod-platform", id, st)
		}
		added[r["Type"].(string)]++
	}
	for id := range old {
		if _, ok := new[id]; !ok {
			t.Errorf("removed %s", id)
		}
	}
	want := map[string]int{
		"AWS::SQS::Queue": 4, "AWS::SQS::QueuePolicy": 4, "AWS::Lambda::EventSourceMapping": 2,
		"AWS::Lambda::Function": 2, "AWS::IAM::Role": 2, "AWS::IAM::Policy": 2, "AWS::Logs::LogGroup": 2,
		"AWS::CloudWatch::Alarm": 5,
	}
	if fmt.Sprint(added) != fmt.Sprint(want) {
		t.Errorf("added %v\nwant  %v", added, want)
	}
	// Within its stack, only the stack's parameter (its lambdas) and dashboard (a row more) change.
	for id, r := range old {
		n, ok := new[id]
		if !ok || fmt.Sprint(r) == fmt.Sprint(n) {
			continue
		}
		switch p := path(r.(map[string]any)); p {
		case "LambdasParameter-platform/Resource", "Dashboard-platform/Resource":
		default:
			t.Errorf("changed %s (%s)", id, p)
		}
	}
	// Every other stack's template file is the same, byte for byte.
	for _, st := range after.stacks.All() {
		if name := *st.StackName(); name != "atf-prod-platform" {
			assertSameTemplate(t, before["prod"], after, name)
		}
	}
}

// assertSameTemplate fails unless stack name has the same template file in both synths.
func assertSameTemplate(t *testing.T, a, b *synthesized, name string) {
	t.Helper()
	read := func(s *synthesized) []byte {
		out, err := os.ReadFile(filepath.Join(s.outdir, name+".template.json"))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if x, y := read(a), read(b); !bytes.Equal(x, y) {
		t.Errorf("%s's template changed (%d bytes, then %d)", name, len(x), len(y))
	}
}

// TestBadInput: New refuses a registry or an environment that cannot deploy, naming why.
func TestBadInput(t *testing.T) {
	envs := mustEnvs(t)
	for name, tc := range map[string]struct {
		registry string
		env      func(*Environment)
		want     string
	}{
		"function over 15 minutes": {`{"lambdas": [{"name": "a", "timeout": "890s"}]}`, nil, `environment dev: registry: lambdas[0] "a": timeout 14m50s plus the worker function's margin 15s`},
		"queue name too long":      {`{"lambdas": [{"name": "` + strings.Repeat("a", 64) + `"}]}`, nil, "it must fit SQS's 80"},
		"no shards":                {`{"lambdas": [{"name": "a"}]}`, func(e *Environment) { e.Shards = 0 }, "environment dev: shards must be in 1..256 (dynamostore.MaxShards), got 0"},
		// More shards than the functions' store accepts would synthesize and then stop every
		// function at cold start.
		"shards over the store's": {`{"lambdas": [{"name": "a"}]}`, func(e *Environment) { e.Shards = 300 }, "environment dev: shards must be in 1..256 (dynamostore.MaxShards), got 300"},
		"missing asset":           {`{"lambdas": [{"name": "a", "handler": "nope"}]}`, nil, "workers-nope.zip is missing: run `make build` first"},
		// Worker scale-out that could fill the account's concurrency, throttling the API.
		"over the account's concurrency": {busyRegistry, reserving, "environment dev: the functions' reserved concurrency 601 plus the event source mappings' MaximumConcurrency 600 is 1201, over the account's concurrency limit 1000 (account_concurrency)"},
		// A stack's lambdas must fit the 4 KB of its SSM parameter.
		"parameter over 4 KB": {bigStackRegistry(), nil, "over the 4096 bytes of an SSM parameter: split the stack"},
		"reservations over AWS's": {`{"lambdas": [{"name": "a", "handler": "echo"}]}`, func(e *Environment) { e.ReservedConcurrency, e.StatusConcurrency = true, 950 },
			"environment dev: the functions reserve a concurrency of 951, which leaves less than the 100 unreserved that AWS requires of the account's limit 1000"},
		// A new account's limit keeps all of its 10 unreserved: nothing can be reserved there.
		"reservations on a new account": {`{"lambdas": [{"name": "a", "handler": "echo"}]}`, func(e *Environment) { e.ReservedConcurrency, e.AccountConcurrency = true, 10 },
			"which leaves less than the 10 unreserved that AWS requires of the account's limit 10 (account_concurrency): set reserved_concurrency false"},
	} {
		t.Run(name, func(t *testing.T) {
			reg, err := registry.Parse([]byte(tc.registry))
			if err != nil {
				t.Fatal(err)
			}
			e := envs["dev"]
			if tc.env != nil {
				tc.env(&e)
			}
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("New panicked with %v, want %q", r, tc.want)
				}
			}()
			root := standIn(t)
			New(newApp(t.TempDir()), Props{Name: "dev", Env: e, Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root})
		})
	}
}

// TestConcurrencyOverEveryStack: the account's concurrency is checked over every stack of the
// environment, not the one being built: two teams that each fit the account but not together are
// refused, even when the app builds one team's stacks (make deploy TEAM=).
func TestConcurrencyOverEveryStack(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [
		{"name": "a", "team": "one", "handler": "echo", "priorities": ["normal"], "concurrency": 1, "function": {"max_concurrency": {"normal": 300}}},
		{"name": "b", "team": "two", "handler": "echo", "priorities": ["normal"], "concurrency": 1, "function": {"max_concurrency": {"normal": 300}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	root := standIn(t)
	for _, team := range []string{"", "one"} {
		func() {
			defer func() {
				want := "environment dev: the functions' reserved concurrency 601 plus the event source mappings' MaximumConcurrency 600 is 1201"
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
					t.Errorf("team %q: New panicked with %v, want %q", team, r, want)
				}
			}()
			e := mustEnvs(t)["dev"]
			reserving(&e)
			New(newApp(t.TempDir()), Props{Name: "dev", Env: e, Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root, Team: team})
		}()
	}
}

// TestTeamStacksOnly: Props.Team builds that team's stacks alone, without the core, as make
// deploy TEAM= deploys them; a team the registry does not have is refused, pointing at make
// destroy.
func TestTeamStacksOnly(t *testing.T) {
	reg := mustLoadRegistry(t)
	root := standIn(t)
	st := New(newApp(t.TempDir()), Props{Name: "dev", Env: mustEnvs(t)["dev"], Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root, Team: "batch"})
	var names []string
	for _, s := range st.All() {
		names = append(names, *s.StackName())
	}
	if st.Core != nil || !slices.Equal(names, []string{"atf-dev-batch"}) {
		t.Errorf("team batch builds %v (core %v), want [atf-dev-batch] alone", names, st.Core != nil)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `team "gone" has no lambda in the registry; to delete the stacks of a removed team, see make destroy`) {
			t.Errorf("New of an unknown team panicked with %v", r)
		}
	}()
	New(newApp(t.TempDir()), Props{Name: "dev", Env: mustEnvs(t)["dev"], Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root, Team: "gone"})
}

// bigStackRegistry is 50 lambdas of long names in one stack: about 4.7 KB of parameter.
func bigStackRegistry() string {
	var entries []string
	for i := range 50 {
		entries = append(entries, fmt.Sprintf(`{"name": "%s-%02d", "team": "big", "handler": "echo", "priorities": ["normal"], "concurrency": 1}`, strings.Repeat("x", 48), i))
	}
	return `{"lambdas": [` + strings.Join(entries, ",") + `]}`
}

// reserving turns on the reservations of an environment (dev's are off).
func reserving(e *Environment) { e.ReservedConcurrency = true }

// busyRegistry is one lambda whose worker may run 600 invocations of one task each.
const busyRegistry = `{"lambdas": [{"name": "a", "handler": "echo", "priorities": ["normal"], "concurrency": 1, "function": {"max_concurrency": {"normal": 600}}}]}`

// TestAccountConcurrencyConfigured: an account whose limit is raised (account_concurrency) takes
// the registry that the default limit refuses.
func TestAccountConcurrencyConfigured(t *testing.T) {
	reg, err := registry.Parse([]byte(busyRegistry))
	if err != nil {
		t.Fatal(err)
	}
	e := mustEnvs(t)["dev"]
	e.ReservedConcurrency, e.AccountConcurrency = true, 2000
	root := standIn(t)
	st := New(newApp(t.TempDir()), Props{Name: "dev", Env: e, Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root})
	assertions.Template_FromStack(st.Lambdas["default"], nil).HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Description": "atf-dev: claims, heartbeats and results of the tasks of lambda a", "ReservedConcurrentExecutions": 600,
	})
}

// TestStatusReserved: each lambda's status function reserves its concurrency, sized to the most
// tasks its worker function runs at once (MaximumConcurrency × BatchSize over its event sources),
// so that worker scale-out cannot throttle claims and heartbeats; an environment may set it.
func TestStatusReserved(t *testing.T) {
	reg := mustLoadRegistry(t)
	want := map[string]int{} // the status function's path: its reservation
	for _, e := range reg.Lambdas {
		if e.Kind != registry.KindFunction {
			continue
		}
		n := 0
		for _, p := range e.Priorities {
			n += e.Function.MaxConcurrency[p] * e.Function.BatchSize
		}
		want["Lambda-"+e.Name+"/Status/Function/Resource"] = max(n, minStatusReserved)
	}
	for name, s := range environments(t) {
		found := 0
		for _, fn := range s.resources("AWS::Lambda::Function") {
			w, ok := want[path(fn)]
			if !ok {
				continue
			}
			found++
			got := props(fn)["ReservedConcurrentExecutions"]
			if !mustEnvs(t)[name].ReservedConcurrency {
				if got != nil {
					t.Errorf("%s reserves no concurrency, but %s reserves %v", name, path(fn), got)
				}
			} else if got != float64(w) {
				t.Errorf("%s: %s reserves %v, want %d", name, path(fn), got, w)
			}
		}
		if found != len(want) {
			t.Errorf("%s: %d status functions, want %d", name, found, len(want))
		}
	}
	e := mustEnvs(t)["dev"]
	reserving(&e)
	for _, l := range reg.Lambdas {
		if l.Kind == registry.KindFunction {
			if got := statusReserved(e, []registry.Entry{l}); got != want["Lambda-"+l.Name+"/Status/Function/Resource"] {
				t.Errorf("statusReserved(%s) %d", l.Name, got)
			}
		}
	}
	e.StatusConcurrency = 42
	if got := statusReserved(e, reg.Lambdas); got != 42 {
		t.Errorf("statusReserved with status_concurrency 42: %d", got)
	}
}

// TestStatusAlarms: an environment with alarms alarms on any throttle and any error of each
// status function.
func TestStatusAlarms(t *testing.T) {
	for name, s := range environments(t) {
		if mustEnvs(t)[name].Alarms == nil {
			continue
		}
		statuses := map[string]string{} // logical id: path
		for id, fn := range s.resources("AWS::Lambda::Function") {
			if strings.HasSuffix(path(fn), "/Status/Function/Resource") {
				statuses[id] = path(fn)
			}
		}
		if len(statuses) == 0 {
			t.Errorf("%s: no status function", name)
		}
		for status, where := range statuses {
			for _, metric := range []string{"Throttles", "Errors"} {
				var found bool
				for _, a := range s.resources("AWS::CloudWatch::Alarm") {
					p := props(a)
					dims, _ := p["Dimensions"].([]any)
					if p["Namespace"] != "AWS/Lambda" || p["MetricName"] != metric || len(dims) != 1 || ref(dims[0].(map[string]any)["Value"]) != status {
						continue
					}
					found = true
					if p["Threshold"] != 1.0 || p["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || p["Statistic"] != "Sum" || len(refs(p["AlarmActions"])) != 1 {
						t.Errorf("%s: %s %s alarm %v", name, where, metric, p)
					}
				}
				if !found {
					t.Errorf("%s: no alarm on the %s of %s", name, metric, where)
				}
			}
		}
	}
}

// TestLoadEnvironments: the environments file is checked field by field.
func TestLoadEnvironments(t *testing.T) {
	good := `"shards": 4, "log_retention_days": 7, "api": {"rate_limit": 1, "burst_limit": 1}, "nat_gateways": 1, "reserved_concurrency": false`
	for name, tc := range map[string]struct{ json, want string }{
		"unknown field":       {`{"dev": {` + good + `, "shard": 4}}`, `unknown field "shard"`},
		"empty":               {`{}`, "no environment"},
		"bad name":            {`{"Dev": {` + good + `}}`, `environment "Dev": name`},
		"account":             {`{"dev": {` + good + `, "account": "12345"}}`, `account "12345": want 12 digits`},
		"region":              {`{"dev": {` + good + `, "region": "mars"}}`, `region "mars"`},
		"retention":           {`{"dev": {` + strings.Replace(good, `"log_retention_days": 7`, `"log_retention_days": 8`, 1) + `}}`, "log_retention_days 8: want one of [1 3 5 7 14"},
		"throttle":            {`{"dev": {` + strings.Replace(good, `"rate_limit": 1`, `"rate_limit": 0`, 1) + `}}`, "api.rate_limit"},
		"nat":                 {`{"dev": {` + strings.Replace(good, `"nat_gateways": 1`, `"nat_gateways": 3`, 1) + `}}`, "nat_gateways must be in 0..2"},
		"account concurrency": {`{"dev": {` + good + `, "account_concurrency": 9}}`, "account_concurrency must be at least 10"},
		"status concurrency":  {`{"dev": {` + good + `, "status_concurrency": -1}}`, "status_concurrency must not be negative"},
		"shards":              {`{"dev": {` + strings.Replace(good, `"shards": 4`, fmt.Sprintf(`"shards": %d`, dynamostore.MaxShards+1), 1) + `}}`, "shards must be in 1..256"},
		"alarm email":         {`{"dev": {` + good + `, "alarms": {"email": "ops", "dlq_messages": 1, "dead_tasks": 1, "delivery_p95_ms": 1, "consumer_errors": 1}}}`, `alarms.email "ops"`},
		"alarm zero":          {`{"dev": {` + good + `, "alarms": {"dlq_messages": 1, "dead_tasks": 0, "delivery_p95_ms": 1, "consumer_errors": 1}}}`, "must be at least 1"},
	} {
		p := filepath.Join(t.TempDir(), "envs.json")
		must(os.WriteFile(p, []byte(tc.json), 0o644))
		_, err := LoadEnvironments(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	p := filepath.Join(t.TempDir(), "envs.json")
	must(os.WriteFile(p, []byte(`{"dev": {`+good+`}}`), 0o644))
	if _, err := LoadEnvironments(p); err != nil {
		t.Error(err)
	}
}

// TestShardsAgreeWithStore: an environment accepts exactly the shard counts the functions' store
// accepts at cold start.
func TestShardsAgreeWithStore(t *testing.T) {
	e := mustEnvs(t)["dev"]
	for _, n := range []int{1, dynamostore.MaxShards, dynamostore.MaxShards + 1, 300, 1000} {
		e.Shards = n
		envErr := e.Validate("dev")
		storeErr := dynamostore.Config{Table: "atf-dev", Shards: n}.Validate()
		if (envErr == nil) != (storeErr == nil) {
			t.Errorf("shards %d: the environment says %v, the store %v", n, envErr, storeErr)
		}
	}
}

// TestWorkerChangesVisibility: a worker function may change the visibility of its own queues'
// messages (sqsworker brings a record failed for a transient reason back in seconds), and of no
// other queue's.
func TestWorkerChangesVisibility(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["staging"]
	all := s.json["Resources"].(map[string]any)
	for _, e := range reg.Lambdas {
		if e.Kind != registry.KindFunction {
			continue
		}
		var want, got []string
		for _, p := range e.Priorities {
			want = append(want, "Lambda-"+e.Name+"/Queues/Queue-"+p+"/Resource")
		}
		for _, p := range s.resources("AWS::IAM::Policy") {
			attached := false
			for _, r := range refs(props(p)["Roles"]) {
				attached = attached || pathOf(all, r) == "Lambda-"+e.Name+"/Worker/Role/Resource"
			}
			if !attached {
				continue
			}
			for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
				st := st.(map[string]any)
				if st["Effect"] == "Allow" && slices.Contains(list(st["Action"]), any("sqs:ChangeMessageVisibility")) {
					for _, r := range refs(st["Resource"]) {
						got = append(got, pathOf(all, r))
					}
				}
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, want) {
			t.Errorf("%s's worker may change the visibility of messages in %v, want %v", e.Name, got, want)
		}
	}
}

// TestMetricsNamespace: every function and executor that runs atf's services writes its EMF
// metrics in the environment's namespace, the one the alarms and the dashboard read.
func TestMetricsNamespace(t *testing.T) {
	for name, env := range environments(t) {
		want := "atf/" + name
		functions := 0
		for _, f := range env.resources("AWS::Lambda::Function") {
			vars, _ := dig(props(f), "Environment", "Variables").(map[string]any)
			if vars[awsfn.EnvTable] == nil {
				continue // a CDK helper, not one of atf's
			}
			functions++
			if got := vars[awsfn.EnvMetricsNamespace]; got != want {
				t.Errorf("%s: function %s: %s = %v, want %s", name, path(f), awsfn.EnvMetricsNamespace, got, want)
			}
		}
		if functions == 0 {
			t.Errorf("%s: no function of atf's found", name)
		}
		for _, td := range env.resources("AWS::ECS::TaskDefinition") {
			for _, c := range props(td)["ContainerDefinitions"].([]any) {
				found := false
				for _, kv := range c.(map[string]any)["Environment"].([]any) {
					kv := kv.(map[string]any)
					if kv["Name"] == awsfn.EnvMetricsNamespace {
						found = kv["Value"] == want
					}
				}
				if !found {
					t.Errorf("%s: executor %s has no %s=%s", name, path(td), awsfn.EnvMetricsNamespace, want)
				}
			}
		}
	}
}

// dig returns v's member at keys, or nil.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
