// Package awsfn holds what every AWS entry point in functions/ shares: the configuration the
// stack passes in environment variables, and the clients built from it. A function's main reads
// Env once at start-up, builds its clients once, and hands them to the handler of its package.
package awsfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go/logging"

	"github.com/openatf/atf/shared/adapter/emf"
	"github.com/openatf/atf/shared/adapter/eventbus"
	"github.com/openatf/atf/shared/adapter/ssmcatalog"
	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// Environment variables the stack sets on every function.
const (
	EnvTable       = "ATF_TABLE"        // the DynamoDB table
	EnvQueuePrefix = "ATF_QUEUE_PREFIX" // the SQS queue name prefix, such as atf-dev
	EnvShards      = "ATF_SHARDS"       // index shards per lambda; dynamostore.DefaultShards if unset
	EnvLambdas     = "ATF_LAMBDAS"      // the lambdas, a JSON array of LambdaSpec
	// EnvLambdasPath is the SSM Parameter Store path under which each lambda stack writes its
	// lambdas, one parameter per stack holding a JSON array of LambdaSpec (LambdasPath). The
	// functions that serve every lambda read them from there instead of ATF_LAMBDAS, through
	// Clients.Catalog (package ssmcatalog), and follow their changes.
	EnvLambdasPath    = "ATF_LAMBDAS_PATH"
	EnvLambda         = "ATF_LAMBDA"          // the lambda a worker function, executor or status function serves
	EnvStatusFunction = "ATF_STATUS_FUNCTION" // the name of the lambda's status function, for workers
	EnvHeartbeat      = "ATF_HEARTBEAT"       // heartbeat interval, a Go duration; task default if unset
	// EnvEventBus names the EventBridge bus (name or ARN) that the functions writing the table
	// put lifecycle events on (package lifecycle); none are published if it is unset.
	EnvEventBus = "ATF_EVENT_BUS"
	// EnvEventsFlush bounds how long a function's invocation waits, after its handler, for the
	// lifecycle events not yet sent (a Go duration) [lifecycle.DefaultFlushTimeout]. 0 waits
	// not at all: events still in flight go when the function next runs, or are lost if AWS
	// retires it first (docs/guarantees.md).
	EnvEventsFlush = "ATF_EVENTS_FLUSH"
	// EnvSendFirst, "true", has the API function send a task's message before it writes the task
	// (frontend.Config.SendFirst): only once every worker and status function forwards and
	// buries message nonces. Unset or "false": write first.
	EnvSendFirst = "ATF_SEND_FIRST"
	// EnvMetricsNamespace is the CloudWatch namespace of the metrics a function writes in its log
	// as Embedded Metric Format (package emf), such as atf/prod; none are written if it is unset.
	EnvMetricsNamespace = "ATF_METRICS_NAMESPACE"
)

// LambdasPath is the SSM Parameter Store path of environment env's lambdas, such as
// /atf/dev/lambdas/: each lambda stack writes one parameter under it.
func LambdasPath(env string) string { return "/atf/" + env + "/lambdas/" }

// LambdaSpec is a lambda as the stack writes it into ATF_LAMBDAS.
type LambdaSpec struct {
	Name        string   `json:"name"`
	Priorities  []string `json:"priorities,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Timeout     string   `json:"timeout,omitempty"` // a Go duration, such as "5m"
	MaxAttempts int      `json:"max_attempts,omitempty"`
	MaxEnqueued int      `json:"max_enqueued,omitempty"`
	// Backoff is the lambda's own backoff; absent: the task config's.
	Backoff *task.BackoffSpec `json:"backoff,omitempty"`
	task.LimitsSpec
}

// Lambda returns the task.Lambda of s, with defaults, validated.
func (s LambdaSpec) Lambda() (task.Lambda, error) {
	l := task.Lambda{Name: s.Name, Priorities: s.Priorities, Concurrency: s.Concurrency, MaxAttempts: s.MaxAttempts, MaxEnqueued: s.MaxEnqueued}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil {
			return task.Lambda{}, fmt.Errorf("lambda %s: timeout %q: %w", s.Name, s.Timeout, err)
		}
		l.Timeout = d
	}
	if s.Backoff != nil {
		b, err := s.Backoff.Policy()
		if err != nil {
			return task.Lambda{}, fmt.Errorf("lambda %s: %w", s.Name, err)
		}
		l.Backoff = &b
	}
	limits, err := s.Limits()
	if err != nil {
		return task.Lambda{}, fmt.Errorf("lambda %s: %w", s.Name, err)
	}
	l.Limits = limits
	l = l.WithDefaults()
	return l, l.Validate()
}

// Env is the configuration of a function.
type Env struct {
	Table          string
	QueuePrefix    string
	Shards         int
	Lambdas        []task.Lambda // of ATF_LAMBDAS; may be empty with LambdasPath
	LambdasPath    string        // ATF_LAMBDAS_PATH: the lambdas are read from SSM (Clients.Catalog)
	Lambda         string        // empty for functions that serve every lambda
	StatusFunction string
	EventBus       string        // empty: no lifecycle events
	EventsFlush    time.Duration // ATF_EVENTS_FLUSH
	SendFirst      bool          // ATF_SEND_FIRST
	// MetricsNamespace is where the function's EMF metrics go; empty: none (ATF_METRICS_NAMESPACE).
	MetricsNamespace string
	Task             task.Config // with defaults
	// Worker names this function's executor in the attempts it runs (executor.Config.Worker):
	// its log stream (AWS_LAMBDA_LOG_STREAM_NAME), which names the execution environment and is
	// where the run's logs are, in the lambda's worker function's log group. Empty outside
	// Lambda. The function's name is left out: the task item keeps the worker's name, and every
	// byte of it counts towards the write units of the task's transitions.
	Worker string
	// LogGroup is this function's log group (AWS_LAMBDA_LOG_GROUP_NAME), where its attempts'
	// logs are (sqsworker.Config.LogGroup). Empty outside Lambda.
	LogGroup string
}

// LoadEnv reads Env from the environment and names the first variable that is wrong.
func LoadEnv() (Env, error) { return ParseEnv(os.Getenv) }

// ParseEnv reads Env through getenv.
func ParseEnv(getenv func(string) string) (Env, error) {
	e := Env{
		Table: getenv(EnvTable), QueuePrefix: getenv(EnvQueuePrefix),
		Lambda: getenv(EnvLambda), StatusFunction: getenv(EnvStatusFunction), EventBus: getenv(EnvEventBus),
		MetricsNamespace: getenv(EnvMetricsNamespace), LambdasPath: getenv(EnvLambdasPath),
	}
	e.Worker, e.LogGroup = getenv("AWS_LAMBDA_LOG_STREAM_NAME"), getenv("AWS_LAMBDA_LOG_GROUP_NAME")
	if e.Table == "" {
		return Env{}, fmt.Errorf("%s is not set", EnvTable)
	}
	if e.QueuePrefix == "" {
		return Env{}, fmt.Errorf("%s is not set", EnvQueuePrefix)
	}
	if v := getenv(EnvShards); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Env{}, fmt.Errorf("%s=%q: %w", EnvShards, v, err)
		}
		e.Shards = n
	}
	e.EventsFlush = lifecycle.DefaultFlushTimeout
	if v := getenv(EnvEventsFlush); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return Env{}, fmt.Errorf("%s=%q: want a Go duration, 0 or more", EnvEventsFlush, v)
		}
		e.EventsFlush = d
	}
	if v := getenv(EnvSendFirst); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Env{}, fmt.Errorf("%s=%q: want true or false", EnvSendFirst, v)
		}
		e.SendFirst = b
	}
	if v := getenv(EnvHeartbeat); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return Env{}, fmt.Errorf("%s=%q: %w", EnvHeartbeat, v, err)
		}
		// The timeouts follow the interval, as under atf dev.
		e.Task.HeartbeatInterval, e.Task.HeartbeatTimeout = d, 6*d
	}
	e.Task = e.Task.WithDefaults()
	if err := e.Task.Validate(); err != nil {
		return Env{}, err
	}
	if e.LambdasPath != "" && !strings.HasPrefix(e.LambdasPath, "/") {
		return Env{}, fmt.Errorf("%s=%q: want an SSM path, such as %s", EnvLambdasPath, e.LambdasPath, LambdasPath("dev"))
	}
	if v := getenv(EnvLambdas); v != "" || e.LambdasPath == "" {
		ls, err := ParseLambdas(v)
		if err != nil {
			return Env{}, fmt.Errorf("%s: %w", EnvLambdas, err)
		}
		if len(ls) == 0 {
			return Env{}, fmt.Errorf("%s lists no lambda", EnvLambdas)
		}
		e.Lambdas = ls
	}
	if e.Lambda != "" {
		if _, ok := e.LambdaNamed(e.Lambda); !ok {
			return Env{}, fmt.Errorf("%s=%q is not in %s", EnvLambda, e.Lambda, EnvLambdas)
		}
	}
	return e, nil
}

// ParseLambdas reads a JSON array of LambdaSpec, as in ATF_LAMBDAS or a parameter under
// ATF_LAMBDAS_PATH: the lambdas, with defaults, validated.
func ParseLambdas(value string) ([]task.Lambda, error) {
	var specs []LambdaSpec
	if err := json.Unmarshal([]byte(value), &specs); err != nil {
		return nil, fmt.Errorf("want a JSON array of lambdas: %w", err)
	}
	ls := make([]task.Lambda, 0, len(specs))
	for _, s := range specs {
		l, err := s.Lambda()
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// LambdaNamed returns the lambda called name.
func (e Env) LambdaNamed(name string) (task.Lambda, bool) {
	for _, l := range e.Lambdas {
		if l.Name == name {
			return l, true
		}
	}
	return task.Lambda{}, false
}

// Clients are the AWS clients of a function, built once per process.
type Clients struct {
	AWS   aws.Config
	DB    *dynamodb.Client
	Store *dynamostore.Store
	Queue *sqsqueue.Queue
	// Events publishes the lifecycle events of the writes made through TaskStore, to the bus
	// of ATF_EVENT_BUS; nil without one. A handler flushes it before its invocation returns
	// (lifecycle.FlushAfter).
	Events *lifecycle.Publisher
	// Metrics writes the function's metrics to its log in Embedded Metric Format, in the namespace
	// of ATF_METRICS_NAMESPACE; nil without one. TaskStore records its writes' and errors'; the
	// executor and the consumer take it in their Config.
	Metrics metrics.Recorder
	// Catalog is where the services that serve every lambda learn them: the parameters under
	// ATF_LAMBDAS_PATH if it is set, else the lambdas of ATF_LAMBDAS.
	Catalog task.Catalog

	emf *emf.Recorder // Metrics, if any
}

// Invoked ends an invocation of a function whose services write through TaskStore: it writes
// the capacity units of its store calls by lambda, at most once a minute (emf.Recorder.Invoked).
// A function's main passes it to Start.
func (c Clients) Invoked() {
	if c.emf != nil {
		c.emf.Invoked()
	}
}

// TaskStore is the store the services write through: Store, publishing lifecycle events when
// the function has a bus, and recording metrics when it has a namespace for them.
func (c Clients) TaskStore() task.Store {
	var s task.Store = c.Store
	if c.Events != nil {
		s = lifecycle.Wrap(s, c.Events)
	}
	if c.Metrics != nil {
		s = metrics.Wrap(s, c.Metrics)
	}
	return s
}

// Open builds the clients of e from the standard AWS environment (region, credentials and, for
// emulators, endpoint URLs).
func Open(ctx context.Context, e Env, log *slog.Logger) (Clients, error) {
	// The SDK's own warnings go to the function's structured log, not as plain text to stderr.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithLogger(logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		log.Warn(fmt.Sprintf(format, v...), "source", "aws-sdk", "class", string(c))
	})))
	if err != nil {
		return Clients{}, fmt.Errorf("AWS config: %w", err)
	}
	if cfg.Region == "" {
		return Clients{}, errors.New("no AWS region: set AWS_REGION")
	}
	var emfMetrics *emf.Recorder
	dbOpts := []func(*dynamodb.Options){func(o *dynamodb.Options) {
		// Emulators send no CRC32 header on errors, and the SDK then warns about every failed
		// condition (aws/aws-sdk-go-v2#3545). AWS itself keeps the check.
		o.DisableValidateResponseChecksum = Emulated("DYNAMODB")
	}}
	if e.MetricsNamespace != "" {
		emfMetrics = emf.New(os.Stderr, e.MetricsNamespace) // beside the JSON logs; stdout is ATF_INVOKE's answer
		// The capacity units of each store call, by the lambda TaskStore names in its context.
		dbOpts = append(dbOpts, dynamostore.ReportConsumed(func(ctx context.Context, u cost.Units) {
			emfMetrics.Consumed(metrics.LambdaOf(ctx), u)
		}))
	}
	db := dynamostore.NewClient(cfg, dbOpts...)
	store, err := dynamostore.New(db, dynamostore.Config{Table: e.Table, Shards: e.Shards})
	if err != nil {
		return Clients{}, err
	}
	// A drain of the dead-letter queues holds consumer.DrainReaders receives at once; with the
	// SDK's default of 10 idle connections a host, each drain would open hundreds of TLS
	// connections again.
	sqsHTTP := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, consumer.DrainReaders)
	})
	queue, err := sqsqueue.New(sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = sqsHTTP }), sqsqueue.Config{Prefix: e.QueuePrefix, Logger: log})
	if err != nil {
		return Clients{}, err
	}
	c := Clients{AWS: cfg, DB: db, Store: store, Queue: queue, Catalog: task.FixedCatalog(e.Lambdas)}
	if emfMetrics != nil {
		c.Metrics, c.emf = emfMetrics, emfMetrics
	}
	if e.LambdasPath != "" {
		cc := ssmcatalog.Config{Client: ssm.NewFromConfig(cfg), Path: e.LambdasPath, Parse: ParseLambdas, Logger: log}
		if emfMetrics != nil {
			cc.Metrics = emfMetrics
		}
		if c.Catalog, err = ssmcatalog.New(cc); err != nil {
			return Clients{}, err
		}
	}
	if e.EventBus != "" {
		sink, err := eventbus.New(eventbus.NewClient(cfg), e.EventBus)
		if err != nil {
			return Clients{}, err
		}
		if c.Events, err = lifecycle.NewPublisher(lifecycle.Config{Sink: sink, Logger: log}); err != nil {
			return Clients{}, err
		}
	}
	return c, nil
}

// Emulated reports whether the environment points service (such as DYNAMODB) at an endpoint
// other than AWS's own.
func Emulated(service string) bool {
	return os.Getenv("AWS_ENDPOINT_URL_"+service) != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
}

// Logger returns the JSON logger of a function: CloudWatch keeps one record per line.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, nil))
}

// Status returns the heartbeat and status controller a worker talks to: the status function
// named by ATF_STATUS_FUNCTION, over Lambda Invoke; or, when none is named (a local run), the
// status function's handler in-process, still through its JSON contract, serving e.Lambda's
// tasks only as the lambda's status function does on AWS.
func Status(e Env, c Clients, log *slog.Logger) executor.Status {
	if e.StatusFunction != "" {
		return statusfn.NewClient(statusfn.LambdaInvoker{Client: awslambda.NewFromConfig(c.AWS), Function: e.StatusFunction})
	}
	local := status.New(c.TaskStore(), status.Config{Task: e.Task, Logger: log, Queue: c.Queue, Lambdas: c.Catalog})
	h := statusfn.NewHandler(local, log)
	if e.Lambda != "" {
		h = statusfn.NewLambdaHandler(local, e.Lambda, log)
	}
	return statusfn.NewClient(statusfn.LocalInvoker{Handler: h})
}
