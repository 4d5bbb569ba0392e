package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// Poll intervals of the consumer under atf dev. A sweep of the embedded store costs one SQLite
// query per lambda and priority, so it runs far more often than on AWS, where each query of
// each shard is a request. Scheduling wakes the consumer at once on either backend.
const (
	devPoll = 100 * time.Millisecond
	awsPoll = 500 * time.Millisecond
)

// awsIdleWait is how long a lambda's controller long-polls its highest priority queue when all
// are empty, on SQS: every look at a queue is a request, and SQS waits in whole seconds.
const awsIdleWait = time.Second

func dev(args []string) error {
	fs := flag.NewFlagSet("atf dev", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "API listen address")
	backend := fs.String("backend", "embedded", "embedded (SQLite and in-memory queues) or aws (DynamoDB and SQS, from the AWS environment variables)")
	db := fs.String("db", ".atf/atf.db", "SQLite database file (embedded backend)")
	retention := fs.Duration("retention", sqlitestore.DefaultRetention, "how long a finished task stays in the SQLite file after its last write before it is pruned, as DynamoDB's TTL does on aws; 0 keeps every task (embedded backend)")
	table := fs.String("table", "atf-dev", "DynamoDB table (aws backend)")
	prefix := fs.String("queue-prefix", "atf-dev", "SQS queue name prefix (aws backend)")
	shards := fs.Int("shards", dynamostore.DefaultShards, "index shards per lambda (aws backend)")
	create := fs.Bool("create", false, "create the DynamoDB table and SQS queues if missing (aws backend)")
	functions := fs.Bool("functions", false, "run the AWS function handlers fed by local event sources (SQS mappings, a scheduled consumer) instead of in-process services (aws backend)")
	handlers := fs.String("handlers", "", "folder of executable handlers, one lambda per file (with --registry, the handlers its entries name)")
	registryFile := fs.String("registry", "", "the lambda registry (lambdas.json): only its lambdas are served, as on AWS, each with its settings and handler")
	concurrency := fs.Int("concurrency", task.DefaultConcurrency, "tasks run at once per lambda")
	timeout := fs.Duration("timeout", task.DefaultHandlerTimeout, "handler timeout; a program that outlives it is killed")
	poll := fs.Duration("poll", 0, fmt.Sprintf("how often the consumer sweeps for due tasks (default %s, %s on aws)", devPoll, awsPoll))
	grace := fs.Duration("grace", 10*time.Second, "on shutdown, how long running tasks may finish before they are stopped and released")
	heartbeat := fs.Duration("heartbeat", task.DefaultHeartbeatInterval, "heartbeat interval (the heartbeat timeout is 6 times it)")
	enqueueTimeout := fs.Duration("enqueue-timeout", task.DefaultEnqueueTimeout, "how long a task may wait in its queue unclaimed before it is enqueued again (it covers a message lost, as when atf dev dies between enqueuing a task and sending its message)")
	maxAttempts := fs.Int("max-attempts", task.DefaultMaxAttempts, "default max attempts of a task")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	events := fs.String("events", "", "publish the tasks' lifecycle events: stdout (JSON lines, as a rule's target gets them) or eventbridge (PutEvents on --event-bus, from the AWS environment variables)")
	eventBus := fs.String("event-bus", "atf-dev", "the EventBridge event bus of --events eventbridge (a name or ARN)")
	token := fs.String("token", "", "if set, every API request must carry it as \"Authorization: Bearer TOKEN\"; required to listen beyond loopback (default $ATF_TOKEN)")
	jsonLog := fs.Bool("json", false, "log JSON lines (slog's JSON handler) rather than text")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("dev takes no arguments, got %q", pos)
	}
	if *handlers == "" {
		return fmt.Errorf("dev needs --handlers DIR: a folder of executable files, one lambda each")
	}
	if *concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1, got %d", *concurrency)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	var logHandler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	if *jsonLog {
		logHandler = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(logHandler)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := local.Config{
		Addr: *addr, DBPath: *db, Retention: devRetention(*retention), HandlersDir: *handlers, Concurrency: *concurrency, Timeout: *timeout,
		Task: task.Config{
			PollInterval: *poll, HeartbeatInterval: *heartbeat, HeartbeatTimeout: 6 * *heartbeat,
			EnqueueTimeout: *enqueueTimeout, MaxAttempts: *maxAttempts,
		},
		Logger: log, Token: cmp.Or(*token, os.Getenv("ATF_TOKEN")),
	}
	sink, err := eventSink(ctx, *events, *eventBus, os.Stdout)
	if err != nil {
		return err
	}
	cfg.Events = sink
	if *registryFile != "" {
		reg, err := registry.Load(*registryFile)
		if err != nil {
			return err
		}
		cfg.Registry = reg
	}
	switch *backend {
	case "embedded":
		if *poll == 0 {
			cfg.Task.PollInterval = devPoll
		}
	case "aws":
		if *poll == 0 {
			cfg.Task.PollInterval = awsPoll
		}
		lambdas, err := cfg.Lambdas()
		if err != nil {
			return err
		}
		b := awsBackend{Table: *table, Prefix: *prefix, Shards: *shards, Create: *create}
		if cfg.Store, cfg.Queue, err = b.open(ctx, lambdas, log); err != nil {
			return err
		}
		cfg.IdleWait = awsIdleWait
		if *functions {
			cfg.Functions = &local.Functions{SQS: b.sqs, QueuePrefix: *prefix}
		}
		log.Info("using DynamoDB and SQS", "table", *table, "queue_prefix", *prefix)
	default:
		return fmt.Errorf("--backend must be embedded or aws, got %q", *backend)
	}
	if *functions && *backend != "aws" {
		return fmt.Errorf("--functions needs --backend aws")
	}
	stack, err := local.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	log.Info("shutting down; running tasks may finish", "grace", *grace)
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	stack.Stop(sctx)
	log.Info("stopped")
	return nil
}

// devRetention is local.Config.Retention for --retention: 0 keeps every task.
func devRetention(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func printLambdas(w io.Writer, v any) error {
	ls, ok := v.([]task.LambdaInfo)
	if !ok {
		return fmt.Errorf("cannot print %T", v)
	}
	fmt.Fprintln(w, "LAMBDA\tPRIORITIES\tGATES\tTASKS")
	for _, l := range ls {
		gates := []string{}
		for _, g := range l.Gates {
			name := "lambda"
			if g.Collection != "" {
				name = g.Collection
			}
			gates = append(gates, name+"="+g.Mode)
		}
		if len(gates) == 0 {
			gates = append(gates, "open")
		}
		counts := []string{}
		for s, n := range l.Counts {
			counts = append(counts, fmt.Sprintf("%s=%d", s, n))
		}
		sort.Strings(counts)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.Name, strings.Join(l.Priorities, ","), strings.Join(gates, " "), strings.Join(counts, " "))
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
