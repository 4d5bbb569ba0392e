// Package stack is the CDK stacks of one atf environment, built from the environment's
// configuration (Environment) and the lambda registry (shared/registry): the core stack
// atf-<env> (the table, the API, the consumer, the event bus, the alarm topic, the executors'
// network), which knows no lambda, and a stack per group of lambdas, atf-<env>-<stack> (their
// queues, functions or executors, alarms, dashboard, and the SSM parameter that lists them for
// the API and the consumer). No stack exports anything: a lambda stack reaches the core's
// resources by their known names. Each concern is a construct in a file of its own:
//
//	store.go     the DynamoDB table: keys, the due and list indexes, TTL, PITR, capacity (on demand or auto-scaled)
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
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
)

// Props are what one environment's stacks are built from.
type Props struct {
	awscdk.StackProps
	// Name is the environment's name, such as dev: the core stack is atf-<name>, and so are the
	// table, the event bus and the queue prefix; each lambda stack is atf-<name>-<stack>.
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
	// deploy-local, into moto without Docker); the stacks warn that they left them out.
	WithoutECS bool
	// Team, if set, builds that team's lambda stacks only, without the core: what `make deploy
	// TEAM=<team>` deploys. The checks over the whole environment (concurrency) still see every
	// lambda of the registry.
	Team string
}

// Stacks are the CloudFormation stacks of one environment.
type Stacks struct {
	// Core is atf-<env>: the table, the API, the consumer, the event bus, the alarm topic and the
	// executors' network; nil if Props.Team is set. It holds nothing of any one lambda, so that
	// adding or removing a lambda leaves it as it is.
	Core awscdk.Stack
	// Lambdas are the lambda stacks, atf-<env>-<stack>, by the registry's stack name.
	Lambdas map[string]awscdk.Stack
}

// All returns every stack, the core first, then the lambda stacks by name.
func (s Stacks) All() []awscdk.Stack {
	var out []awscdk.Stack
	if s.Core != nil {
		out = append(out, s.Core)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Lambdas)) {
		out = append(out, s.Lambdas[name])
	}
	return out
}

// maxLambdasParameter bounds the SSM parameter of a stack's lambdas: a standard parameter holds
// at most 4 KB.
const maxLambdasParameter = 4096

// maxAZs is how many availability zones the executors' network spans.
const maxAZs = 2

// deployment is what every construct of one stack shares: one per stack, copied from the
// environment's (forStack), so that no construct of one stack reaches into another.
type deployment struct {
	stack   awscdk.Stack
	name    string // the environment, such as dev
	env     Environment
	reg     *registry.Registry
	prefix  string // atf-<env>: the table name, event bus name and queue prefix
	assets  string
	root    string
	removal awscdk.RemovalPolicy
	// events is the lifecycle events' bus and its example rule; core stack only, nil if the
	// environment has none. bus is the bus every stack publishes to: the core's own, or,
	// in a lambda stack, the same bus by its name.
	events *events
	bus    awsevents.IEventBus
}

// StackName is the name of the lambda stack called stack in environment env.
func StackName(env, stack string) string { return "atf-" + env + "-" + stack }

// New returns the stacks of one environment. It panics with a message for people on a bad
// registry or configuration, as CDK does on a bad construct.
func New(scope constructs.Construct, p Props) Stacks {
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
	// Every stack of the environment shares the account's concurrency: checked over the whole
	// registry, whichever stacks are built.
	if err := checkConcurrency(p.Env, p.Registry); err != nil {
		panic(fmt.Errorf("environment %s: %w", p.Name, err))
	}
	d.removal = awscdk.RemovalPolicy_DESTROY
	if p.Env.Retain {
		d.removal = awscdk.RemovalPolicy_RETAIN
	}
	out := Stacks{Lambdas: map[string]awscdk.Stack{}}
	if p.Team == "" {
		out.Core = newCore(scope, d, p)
	}
	for _, name := range p.Registry.Stacks() {
		team, entries := p.Registry.Stack(name)
		if p.Team != "" && team != p.Team {
			continue
		}
		st := newLambdaStack(scope, d, p, name, team, entries)
		if out.Core != nil {
			// Deployed after the core, whose table, bus and topic it uses by name; no export, so
			// either can be deleted without the other.
			st.AddDependency(out.Core, jsii.String("uses the core's table, event bus and alarm topic by name"))
		}
		out.Lambdas[name] = st
	}
	if p.Team != "" && len(out.Lambdas) == 0 {
		panic(fmt.Errorf("environment %s: team %q has no lambda in the registry; to delete the stacks of a removed team, see make destroy", p.Name, p.Team))
	}
	return out
}

// forStack returns d for the constructs of st: a copy that shares no construct of another stack.
func (d *deployment) forStack(st awscdk.Stack) *deployment {
	c := *d
	c.stack, c.events, c.bus = st, nil, nil
	return &c
}

// newStack makes a stack tagged with its environment, and, for a lambda stack, its team.
func newStack(scope constructs.Construct, name, description string, p Props, tags map[string]string) awscdk.Stack {
	props := p.StackProps
	props.Description = jsii.String(description)
	props.StackName = jsii.String(name)
	st := awscdk.NewStack(scope, jsii.String(name), &props)
	tags["atf:environment"] = p.Name
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		// Not in the SSM parameters' own properties: moto 5.2.5 fails to create a parameter
		// whose Tags CloudFormation gives as a map (make deploy-local). CloudFormation still
		// tags them on AWS, with the stack's tags, which the CDK CLI passes on to every
		// resource that takes tags.
		awscdk.Tags_Of(st).Add(jsii.String(k), jsii.String(tags[k]), &awscdk.TagProps{
			ExcludeResourceTypes: jsii.Strings("AWS::SSM::Parameter"),
		})
	}
	return st
}

// newCore makes the core stack, atf-<env>: what every lambda shares. Nothing in it depends on
// the registry's lambdas: the API and the consumer learn them at run time from the SSM
// parameters the lambda stacks write (ATF_LAMBDAS_PATH), and reach their queues by name.
func newCore(scope constructs.Construct, env *deployment, p Props) awscdk.Stack {
	st := newStack(scope, env.prefix, "atf, the async task framework: environment "+p.Name+", its core", p, map[string]string{})
	d := env.forStack(st)
	store := newStore(st, "Store", d)
	if p.Env.Events != nil {
		d.events = newEvents(st, "Events", d)
		d.bus = d.events.bus
	}
	consumer := newConsumer(st, "Consumer", d, store)
	api := newAPI(st, "Api", d, store)
	metrics := newMetrics(d)
	var alarmTopic awssns.ITopic
	if p.Env.Alarms != nil {
		alarmTopic = newCoreAlarms(st, "Alarms", d, metrics, consumer)
	}
	newCoreDashboard(st, "Dashboard", d, metrics, api, consumer, store)
	if !p.WithoutECS {
		newExecutorCluster(st, "Executors", d)
	} else {
		awscdk.Annotations_Of(st).AddWarningV2(jsii.String("atf:without-ecs"), jsii.String(
			"ecs=false: the executors' VPC and cluster are left out; the ecs lambdas' queues stay and their tasks wait there"))
	}

	output(st, "ApiUrl", api.stage.Url())
	output(st, "TableName", store.table.TableName())
	output(st, "QueuePrefix", jsii.String(d.prefix))
	output(st, "LambdasPath", jsii.String(awsfn.LambdasPath(p.Name)))
	if alarmTopic != nil {
		output(st, "AlarmTopicArn", alarmTopic.TopicArn())
	}
	if d.events != nil {
		output(st, "EventBusName", d.events.bus.EventBusName())
		output(st, "EventsFailedQueueUrl", d.events.queue.QueueUrl())
	}
	applyNag(d)
	return st
}

// newLambdaStack makes the stack of one group of lambdas, atf-<env>-<name>: per lambda its
// queues, its worker and status functions or its executors, its alarms and its dashboard row,
// and one SSM parameter listing the group's lambdas for the API and the consumer. It reaches the
// core's table, event bus and alarm topic by their known names (ARNs built with FormatArn), never
// by an export: deleting this stack deletes its lambdas and their parameter, and blocks nothing.
func newLambdaStack(scope constructs.Construct, env *deployment, p Props, name, team string, entries []registry.Entry) awscdk.Stack {
	st := newStack(scope, StackName(p.Name, name), "atf, the async task framework: environment "+p.Name+", lambdas of team "+team+" (stack "+name+")",
		p, map[string]string{"atf:team": team, "atf:stack": name})
	d := env.forStack(st)
	if p.Env.Events != nil {
		d.bus = awsevents.EventBus_FromEventBusArn(st, jsii.String("EventBus"), d.arn("events", "event-bus", d.prefix))
	}
	store := importStore(st, "Store", d)
	var names []string
	var cluster *executorCluster
	var withoutECS []string // the ecs lambdas whose executors are left out
	var lambdas []*lambdaResources
	for i, e := range entries {
		names = append(names, e.Name)
		scope := constructs.NewConstruct(st, jsii.String("Lambda-"+e.Name))
		lr := &lambdaResources{scope: scope, entry: e, index: i, queues: newQueues(scope, "Queues", d, e)}
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
				cluster = importExecutorCluster(st, "Executors", d)
			}
			lr.executor = newExecutor(scope, "Executor", d, e, lr.queues, store, cluster)
			lr.logs = lr.executor.logGroup
		}
		lambdas = append(lambdas, lr)
	}
	if len(withoutECS) > 0 {
		awscdk.Annotations_Of(st).AddWarningV2(jsii.String("atf:without-ecs"), jsii.String(
			"ecs=false: the executors of the ecs lambdas "+strings.Join(withoutECS, ", ")+" are left out (no Fargate service or image); their queues stay and their tasks wait there"))
	}
	metrics := newMetrics(d)
	if p.Env.Alarms != nil {
		newLambdaAlarms(st, d, metrics, lambdas)
	}
	newLambdaDashboard(st, "Dashboard-"+name, d, metrics, name, lambdas)
	newLambdasParameter(st, "LambdasParameter-"+name, d, name, names)
	applyNag(d)
	return st
}

// newLambdasParameter writes the lambdas of stack into the SSM parameter
// awsfn.LambdasPath(env)+stack, as registry.LambdasJSON gives them: the API and the consumer read
// every parameter under the path at run time. A standard parameter holds 4 KB; a stack whose
// lambdas take more is refused, with the way out.
func newLambdasParameter(scope constructs.Construct, id string, d *deployment, stack string, names []string) awsssm.StringParameter {
	js, err := d.reg.LambdasJSON(names...)
	if err != nil {
		panic(err)
	}
	if len(js) > maxLambdasParameter {
		panic(fmt.Errorf("environment %s: stack %s: its lambdas are %d bytes of JSON, over the %d bytes of an SSM parameter: split the stack, giving some of its lambdas another \"stack\" in the registry",
			d.name, stack, len(js), maxLambdasParameter))
	}
	return awsssm.NewStringParameter(scope, jsii.String(id), &awsssm.StringParameterProps{
		ParameterName: jsii.String(awsfn.LambdasPath(d.name) + stack),
		StringValue:   jsii.String(js),
		Tier:          awsssm.ParameterTier_STANDARD,
		Description:   jsii.String("atf-" + d.name + ": the lambdas of stack " + stack + " (" + awsfn.EnvLambdasPath + ")"),
	})
}

// arn is the ARN of a resource of the stack's account and region, by its known name.
func (d *deployment) arn(service, resource, resourceName string) *string {
	c := &awscdk.ArnComponents{Service: jsii.String(service), Resource: jsii.String(resource)}
	if resourceName != "" {
		c.ResourceName = jsii.String(resourceName)
		c.ArnFormat = awscdk.ArnFormat_SLASH_RESOURCE_NAME
	}
	return d.stack.FormatArn(c)
}

// awsMinUnreserved is the concurrency AWS Lambda keeps unreserved in an account whose limit is
// at least that: it refuses a reservation that would leave less. An account with a smaller
// limit (a new account's 10) can reserve nothing (MinUnreserved).
const awsMinUnreserved = 100

// MinUnreserved is the concurrency that AWS keeps unreserved of an account's limit: 100, or the
// whole of a smaller limit.
func MinUnreserved(limit int) int { return min(limit, awsMinUnreserved) }

// consumerReserved is the consumer function's reserved concurrency in env: one, or none where
// the environment reserves nothing. The consumer needs no reservation to be correct: two
// invocations at once are harmless (every move is a conditional write); one keeps them rare.
func consumerReserved(env Environment) int {
	if !env.ReservedConcurrency {
		return 0
	}
	return 1
}

// Concurrency is what every stack of an environment reserves (the consumer and every status
// function; nothing where ReservedConcurrency is off) and lets its event source mappings run
// (their MaximumConcurrency), summed over the whole registry: the stacks share the account's
// limit.
func Concurrency(env Environment, reg *registry.Registry) (reserved, eventSources int) {
	reserved = consumerReserved(env)
	for _, e := range reg.Lambdas {
		if e.Kind != registry.KindFunction {
			continue
		}
		reserved += statusReserved(env, []registry.Entry{e})
		for _, p := range e.Priorities {
			eventSources += e.Function.MaxConcurrency[p]
		}
	}
	return reserved, eventSources
}

// checkConcurrency refuses an environment that reserves concurrency (ReservedConcurrency) and
// whose functions, over all its stacks, may together run more invocations than the account
// allows: the reserved concurrency of its functions plus the MaximumConcurrency of every event
// source mapping must fit the account's limit, and the reservations must leave AWS's unreserved
// minimum. Otherwise worker scale-out can fill the account (throttling the API), or the
// deployment fails. An environment that reserves nothing is not checked: nothing of it can fail
// to deploy for the limit, and its functions share the account's concurrency as they come.
func checkConcurrency(env Environment, reg *registry.Registry) error {
	if !env.ReservedConcurrency {
		return nil
	}
	reserved, eventSources := Concurrency(env, reg)
	return fitAccount(reserved, eventSources, env.AccountLimit(), "the functions")
}

// fitAccount refuses reservations plus event source mappings' MaximumConcurrency that do not fit
// an account's concurrency limit; whose names the functions in the error.
func fitAccount(reserved, eventSources, limit int, whose string) error {
	if keep := MinUnreserved(limit); reserved > limit-keep {
		return fmt.Errorf("%s reserve a concurrency of %d, which leaves less than the %d unreserved that AWS requires of the account's limit %d (account_concurrency): set reserved_concurrency false, or a smaller status_concurrency, or raise the account's limit with AWS and account_concurrency",
			whose, reserved, keep, limit)
	}
	if total := reserved + eventSources; total > limit {
		return fmt.Errorf("%s' reserved concurrency %d plus the event source mappings' MaximumConcurrency %d is %d, over the account's concurrency limit %d (account_concurrency): lower function.max_concurrency in the registry, set status_concurrency, or raise the account's limit with AWS and account_concurrency",
			whose, reserved, eventSources, total, limit)
	}
	return nil
}

// CheckSharedAccounts adds up the environments placed in one account and region (the same
// non-empty account and region), which share its concurrency limit: the environments among them
// that reserve concurrency must fit the limit together, as checkConcurrency requires of each
// alone, and they must agree on the limit. Environments without an account or region are each
// checked alone: where they deploy is known only at deploy time (make doctor checks the
// account then).
func CheckSharedAccounts(envs map[string]Environment, reg *registry.Registry) error {
	type place struct{ account, region string }
	shared := map[place][]string{}
	for _, name := range slices.Sorted(maps.Keys(envs)) {
		if e := envs[name]; e.Account != "" && e.Region != "" {
			p := place{e.Account, e.Region}
			shared[p] = append(shared[p], name)
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(shared), func(a, b place) int { return strings.Compare(a.account+a.region, b.account+b.region) }) {
		names := shared[p]
		if len(names) < 2 {
			continue
		}
		limit := envs[names[0]].AccountLimit()
		var reserving []string
		reserved, eventSources := 0, 0
		for _, name := range names {
			e := envs[name]
			if e.AccountLimit() != limit {
				return fmt.Errorf("environments %s share account %s in %s but not its concurrency limit: account_concurrency %d (%s) and %d (%s); give them the account's limit",
					strings.Join(names, ", "), p.account, p.region, limit, names[0], e.AccountLimit(), name)
			}
			if !e.ReservedConcurrency {
				continue
			}
			r, es := Concurrency(e, reg)
			reserved, eventSources = reserved+r, eventSources+es
			reserving = append(reserving, name)
		}
		if len(reserving) < 2 {
			continue // one alone is checkConcurrency's
		}
		if err := fitAccount(reserved, eventSources, limit, "their functions"); err != nil {
			return fmt.Errorf("environments %s share account %s in %s: %w", strings.Join(reserving, ", "), p.account, p.region, err)
		}
	}
	return nil
}

// lambdaResources are what one lambda of the registry gets.
type lambdaResources struct {
	scope    constructs.Construct // Lambda-<name>, of its stack
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

// commonEnv is the environment every function and executor gets (see package awsfn), and how it
// learns its lambdas: lambdas is ATF_LAMBDAS (a function of one lambda), or empty for
// ATF_LAMBDAS_PATH (the API and the consumer, which serve every lambda of every stack).
func (d *deployment) commonEnv(lambdas string, table *string) map[string]*string {
	env := map[string]*string{
		awsfn.EnvTable:       table,
		awsfn.EnvQueuePrefix: jsii.String(d.prefix),
		awsfn.EnvShards:      jsii.String(strconv.Itoa(d.env.Shards)),
		// The metrics each writes in its log (package emf), for the alarms and the dashboard.
		awsfn.EnvMetricsNamespace: jsii.String(metricsNamespace(d)),
	}
	if lambdas != "" {
		env[awsfn.EnvLambdas] = jsii.String(lambdas)
	} else {
		env[awsfn.EnvLambdasPath] = jsii.String(awsfn.LambdasPath(d.name))
	}
	return env
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
