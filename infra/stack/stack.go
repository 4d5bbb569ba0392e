// Package stack is the CDK stack of one atf environment, built from the environment's
// configuration (Environment) and the lambda registry (shared/registry). Each concern is a
// construct in a file of its own:
//
//	store.go     the DynamoDB table: keys, the due and list indexes, TTL, PITR
//	api.go       the HTTP API (AWS_IAM on every route) and the API function
//	consumer.go  the consumer function and its rate(1 minute) rule
//	status.go    a function lambda's status function, which its worker invokes to claim, heartbeat and report
//	queues.go    a lambda's queues: one per priority, each with a dead-letter queue
//	worker.go    a function lambda's worker function and its SQS event sources
//	executor.go  an ecs lambda's Fargate service running functions/executor (and the cluster)
//	events.go    the lifecycle events' bus, its archive and an example rule (if the environment has events)
//	alarms.go    the metrics the functions' logs feed, and the alarms on them
//	dashboard.go the CloudWatch dashboard
//	nag.go       cdk-nag's AwsSolutions checks and every suppression, with its reason
//
// Permissions come from the constructs' Grant methods, each on the resources one function
// needs: a worker reads only its own lambda's queues and invokes only its own lambda's status
// function; a status function and an executor use only their own lambda's items of the table.
package stack

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
)

// Props are what one environment's stack is built from.
type Props struct {
	awscdk.StackProps
	// Name is the environment's name, such as dev: the stack is atf-<name>, and so are the
	// table and the queue prefix.
	Name     string
	Env      Environment
	Registry *registry.Registry
	// Assets is the folder of the function zips that `make build` writes (bin/lambda):
	// <function>.zip for api, consumer and status, workers-<handler>.zip for function lambdas,
	// and executor/bootstrap and workers-<handler>/bootstrap for the executors' images.
	Assets string
	// Root is the repository's root, the Docker context of the executors' images: their
	// Dockerfile is infra/executor/Dockerfile, and they copy binaries from Assets, which must
	// lie inside it.
	Root string
	// WithoutECS leaves out what the ecs lambdas' executors need: their Fargate services, task
	// definitions, container images (built with Docker at deploy time), scaling, and the VPC and
	// cluster. Their queues stay, so the API and the consumer still take and send their tasks,
	// which wait until executors run. For deploying where images cannot be built or run (make
	// deploy-local, into moto without Docker); the stack warns that it left them out.
	WithoutECS bool
}

// maxLambdasEnv bounds ATF_LAMBDAS: AWS Lambda allows 4 KB for all of a function's environment.
const maxLambdasEnv = 3500

// maxAZs is how many availability zones the executors' network spans.
const maxAZs = 2

// deployment is what every construct of one stack shares.
type deployment struct {
	stack   awscdk.Stack
	name    string // the environment, such as dev
	env     Environment
	reg     *registry.Registry
	prefix  string // atf-<env>: the table name and queue prefix
	assets  string
	root    string
	removal awscdk.RemovalPolicy
	// lambdasJSON is ATF_LAMBDAS of the functions that serve every lambda.
	lambdasJSON string
	// reserved is the reserved concurrency of the stack's functions, and eventSources the
	// MaximumConcurrency of its event source mappings, summed as they are made.
	reserved, eventSources int
	// events is the lifecycle events' bus; nil if the environment has none.
	events *events
}

// New returns the stack of one environment. It panics with a message for people on a bad
// registry or configuration, as CDK does on a bad construct.
func New(scope constructs.Construct, id string, p Props) awscdk.Stack {
	if err := p.Env.Validate(p.Name); err != nil {
		panic(err)
	}
	d := &deployment{name: p.Name, env: p.Env, reg: p.Registry, prefix: "atf-" + p.Name, assets: p.Assets, root: p.Root}
	// The store configuration every function opens at cold start (awsfn.Open): refused here,
	// not by every function once deployed.
	if err := (dynamostore.Config{Table: d.prefix, Shards: p.Env.Shards}).Validate(); err != nil {
		panic(fmt.Errorf("environment %s: %w", p.Name, err))
	}
	if err := p.Registry.Check(registry.Limits{
		WorkerMargin: sqsworker.DefaultMargin,
		QueueName:    func(l, pr string) (string, error) { return sqsqueue.QueueName(d.prefix, l, pr) },
		DLQSuffix:    sqsqueue.DLQSuffix,
	}); err != nil {
		panic(fmt.Errorf("environment %s: %w", p.Name, err))
	}
	all, err := p.Registry.LambdasJSON()
	if err != nil {
		panic(err)
	}
	if len(all) > maxLambdasEnv {
		panic(fmt.Errorf("environment %s: %s of the registry is %d bytes, over the %d that fit a function's environment", p.Name, awsfn.EnvLambdas, len(all), maxLambdasEnv))
	}
	d.lambdasJSON = all
	d.removal = awscdk.RemovalPolicy_DESTROY
	if p.Env.Retain {
		d.removal = awscdk.RemovalPolicy_RETAIN
	}
	if p.Description == nil {
		p.Description = jsii.String("atf, the async task framework: environment " + p.Name)
	}
	d.stack = awscdk.NewStack(scope, &id, &p.StackProps)
	awscdk.Tags_Of(d.stack).Add(jsii.String("atf:environment"), jsii.String(p.Name), nil)

	store := newStore(d.stack, "Store", d)
	if p.Env.Events != nil {
		d.events = newEvents(d.stack, "Events", d)
	}
	var lambdas []*lambdaResources
	var cluster *executorCluster
	var withoutECS []string // the ecs lambdas whose executors are left out
	for i, e := range p.Registry.Lambdas {
		scope := constructs.NewConstruct(d.stack, jsii.String("Lambda-"+e.Name))
		lr := &lambdaResources{entry: e, index: i, queues: newQueues(scope, "Queues", d, e)}
		switch e.Kind {
		case registry.KindFunction:
			lr.status = newStatus(scope, "Status", d, e, store, lr.queues)
			lr.worker = newWorker(scope, "Worker", d, e, lr.queues, lr.status)
			lr.logs = lr.worker.logGroup
		case registry.KindECS:
			if p.WithoutECS {
				withoutECS = append(withoutECS, e.Name)
				break
			}
			if cluster == nil {
				cluster = newExecutorCluster(d.stack, "Executors", d)
			}
			lr.executor = newExecutor(scope, "Executor", d, e, lr.queues, store, cluster)
			lr.logs = lr.executor.logGroup
		}
		lambdas = append(lambdas, lr)
	}
	if len(withoutECS) > 0 {
		awscdk.Annotations_Of(d.stack).AddWarningV2(jsii.String("atf:without-ecs"), jsii.String(
			"ecs=false: the executors of the ecs lambdas "+strings.Join(withoutECS, ", ")+" are left out (no Fargate service, image, VPC or cluster); their queues stay and their tasks wait there"))
	}
	consumer := newConsumer(d.stack, "Consumer", d, store, lambdas)
	api := newAPI(d.stack, "Api", d, store, lambdas)
	metrics := newMetrics(d)
	if p.Env.Alarms != nil {
		newAlarms(d.stack, "Alarms", d, metrics, consumer, lambdas)
	}
	newDashboard(d.stack, "Dashboard", d, metrics, api, consumer, store, lambdas)
	if err := d.checkConcurrency(); err != nil {
		panic(fmt.Errorf("environment %s: %w", p.Name, err))
	}

	output(d.stack, "ApiUrl", api.stage.Url())
	output(d.stack, "TableName", store.table.TableName())
	output(d.stack, "QueuePrefix", jsii.String(d.prefix))
	if d.events != nil {
		output(d.stack, "EventBusName", d.events.bus.EventBusName())
		output(d.stack, "EventsFailedQueueUrl", d.events.queue.QueueUrl())
	}
	applyNag(d)
	return d.stack
}

// minUnreservedConcurrency is the concurrency AWS Lambda keeps unreserved in an account: it
// refuses a reservation that would leave less.
const minUnreservedConcurrency = 100

// checkConcurrency refuses a stack whose functions may together run more invocations than the
// account allows: the reserved concurrency of its functions plus the MaximumConcurrency of every
// event source mapping must fit the account's limit, and the reservations must leave AWS's
// unreserved minimum. Otherwise worker scale-out can fill the account (throttling the API), or
// the deployment fails.
func (d *deployment) checkConcurrency() error {
	limit := d.env.accountConcurrency()
	if d.reserved > limit-minUnreservedConcurrency {
		return fmt.Errorf("the functions reserve a concurrency of %d, which leaves less than the %d unreserved that AWS requires of the account's limit %d (account_concurrency): set a smaller status_concurrency, or raise the account's limit and account_concurrency",
			d.reserved, minUnreservedConcurrency, limit)
	}
	if total := d.reserved + d.eventSources; total > limit {
		return fmt.Errorf("the functions' reserved concurrency %d plus the event source mappings' MaximumConcurrency %d is %d, over the account's concurrency limit %d (account_concurrency): lower function.max_concurrency in the registry, set status_concurrency, or raise the account's limit with AWS and account_concurrency",
			d.reserved, d.eventSources, total, limit)
	}
	return nil
}

// lambdaResources are what one lambda of the registry gets.
type lambdaResources struct {
	entry    registry.Entry
	index    int // in the registry
	queues   *queues
	worker   *worker          // kind function
	status   *status          // kind function: its status function
	executor *executor        // kind ecs; nil if Props.WithoutECS
	logs     awslogs.LogGroup // where its handler's runs are logged
}

func output(scope constructs.Construct, id string, value *string) {
	awscdk.NewCfnOutput(scope, jsii.String(id), &awscdk.CfnOutputProps{Value: value})
}

// commonEnv is the environment every function and executor gets (see package awsfn).
func (d *deployment) commonEnv(lambdasJSON string, table *string) map[string]*string {
	return map[string]*string{
		awsfn.EnvTable:       table,
		awsfn.EnvQueuePrefix: jsii.String(d.prefix),
		awsfn.EnvShards:      jsii.String(strconv.Itoa(d.env.Shards)),
		awsfn.EnvLambdas:     jsii.String(lambdasJSON),
		// The metrics each writes in its log (package emf), for the alarms and the dashboard.
		awsfn.EnvMetricsNamespace: jsii.String(metricsNamespace(d)),
	}
}

// ownLambdaJSON is ATF_LAMBDAS of a worker or executor: its own lambda only, so that adding a
// lambda changes nothing of the others'.
func (d *deployment) ownLambdaJSON(name string) string {
	js, err := d.reg.LambdasJSON(name)
	if err != nil {
		panic(err)
	}
	return js
}

// asset returns the path of a build output in Assets, and fails with what to run if it is
// missing.
func (d *deployment) asset(name string) string {
	path := filepath.Join(d.assets, name)
	if _, err := os.Stat(path); err != nil {
		panic(fmt.Errorf("function asset %s is missing: run `make build` first (%w)", path, err))
	}
	return path
}

// seconds rounds t up to whole seconds.
func seconds(t time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(math.Ceil(t.Seconds())))
}
