// Package ecsexecutor runs the tasks of one lambda on ECS: the logic of functions/executor, the
// container main of the lambda's ECS service. A controller long-polls the lambda's SQS queues in
// priority order into a small priority buffer, and Concurrency executors run the lambda's
// handler, a program in the handlers folder (any executable, or a Go handler built with
// worker.Main), claiming each task first.
//
// Serve runs until its context ends (functions/executor ends it on SIGTERM, what ECS sends before
// it stops a task, or SIGINT), then drains: it stops receiving, hands its buffered messages back
// to their queues at once, lets running tasks finish until the drain timeout, then stops them and
// releases their tasks for another executor, and returns. Keep the drain below the container's
// stopTimeout (at most 120 s on ECS), so the release happens before ECS sends SIGKILL.
//
// Load reads the configuration, from the environment the stack sets (see package awsfn):
// ATF_TABLE, ATF_QUEUE_PREFIX, ATF_SHARDS, ATF_LAMBDAS, ATF_HEARTBEAT, and ATF_LAMBDA, the lambda
// it serves (required). Its own settings are flags, each defaulting to an environment variable:
//
//	-handlers DIR    ATF_HANDLERS     the handlers folder [/opt/atf/handlers]; the program named
//	                                  after the lambda (without extension) is its handler
//	-concurrency N   ATF_CONCURRENCY  tasks run at once [the lambda's concurrency in ATF_LAMBDAS]
//	-prefetch N      ATF_PREFETCH     messages held beyond the free slots [concurrency, at most 10]
//	-drain D         ATF_DRAIN        how long running tasks may finish after SIGTERM [100s]
//
// Handlers run in process groups of their own, so a signal to the container's first process
// reaches the executor alone, and a stopped handler is killed with everything it started.
//
// Each attempt names where the executor's logs are (task.Attempt.LogLocation): its log group and
// stream, which it reads at start from the task metadata endpoint (EnvMetadata), and its worker
// is that stream, which names the ECS task; without them (not on ECS, or not logging through
// awslogs) it warns and runs all the same, named by its host and process id. A handler's
// standard error goes to the executor's log too, a JSON line for each of its lines with the
// task's lambda, id and attempt (executor.Config.LogHandlerOutput): the store (DynamoDB) keeps
// none of it, but the tail of a failure's, as its error.
//
// Handlers start without the AWS credential variables of the executor's environment
// (worker.CredentialVars: on ECS, the task role's credentials endpoint), so the role that claims
// and reports the lambda's tasks is not the handler's to use.
package ecsexecutor

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/service/controller"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Environment variables of the executor's own settings.
const (
	EnvHandlers    = "ATF_HANDLERS"
	EnvConcurrency = "ATF_CONCURRENCY"
	EnvPrefetch    = "ATF_PREFETCH"
	EnvDrain       = "ATF_DRAIN"
)

// Defaults of the settings.
const (
	// DefaultHandlers is where the container image puts the handlers.
	DefaultHandlers = "/opt/atf/handlers"
	// DefaultDrain leaves 20 s of ECS's longest stopTimeout (120 s) to stop handlers and release
	// their tasks.
	DefaultDrain = 100 * time.Second
)

// idleWait is how long the controller long-polls the highest priority queue when all are empty:
// every look at a queue is an SQS request, and SQS waits in whole seconds.
const idleWait = time.Second

// Config is everything the executor needs, read once at start-up by Load.
type Config struct {
	Env         awsfn.Env
	Lambda      task.Lambda // with Concurrency set
	Handler     worker.Handler
	HandlersDir string
	Prefetch    int
	Drain       time.Duration
	// MetadataURI is the task metadata endpoint (EnvMetadata), where Serve reads where its logs
	// are; empty when not on ECS.
	MetadataURI string
}

// Load reads the configuration from flags (args, without the program name), the environment
// (getenv), and the handlers folder; usage receives the flags' help and parse errors.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	env, err := awsfn.ParseEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	if env.Lambda == "" {
		return Config{}, fmt.Errorf("%s is not set: name the lambda this executor runs", awsfn.EnvLambda)
	}
	l, _ := env.LambdaNamed(env.Lambda)

	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	fs.SetOutput(usage)
	handlers := fs.String("handlers", or(getenv(EnvHandlers), DefaultHandlers), "the handlers folder (env "+EnvHandlers+")")
	concurrency := fs.Int("concurrency", 0, "tasks run at once; 0 is the lambda's concurrency in ATF_LAMBDAS (env "+EnvConcurrency+")")
	prefetch := fs.Int("prefetch", -1, "messages held beyond the free slots; -1 is the concurrency, at most 10 (env "+EnvPrefetch+")")
	drain := fs.Duration("drain", DefaultDrain, "how long running tasks may finish after SIGTERM (env "+EnvDrain+")")
	for _, v := range []struct {
		name string
		set  func(string) error
	}{
		{EnvConcurrency, func(s string) error { return setInt(concurrency, s) }},
		{EnvPrefetch, func(s string) error { return setInt(prefetch, s) }},
		{EnvDrain, func(s string) error { return setDuration(drain, s) }},
	} {
		if s := getenv(v.name); s != "" {
			if err := v.set(s); err != nil {
				return Config{}, fmt.Errorf("%s=%q: %w", v.name, s, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("executor takes no arguments, got %q", fs.Args())
	}
	switch {
	case *concurrency < 0:
		return Config{}, fmt.Errorf("concurrency must not be negative, got %d", *concurrency)
	case *prefetch < -1:
		return Config{}, fmt.Errorf("prefetch must be at least 0 (or -1 for the default), got %d", *prefetch)
	case *drain <= 0:
		return Config{}, fmt.Errorf("drain must be positive, got %s", *drain)
	}
	if *concurrency > 0 {
		l.Concurrency = *concurrency
	}
	if *prefetch == -1 {
		*prefetch = min(l.Concurrency, controller.MaxReceive)
	}

	mux := worker.NewMux()
	if _, err := mux.HandleDir(*handlers); err != nil {
		return Config{}, err
	}
	h, ok := mux.Handler(l.Name)
	if !ok {
		return Config{}, fmt.Errorf("no handler for lambda %s in %s: want an executable file named %s (with any extension)", l.Name, *handlers, l.Name)
	}
	// The task role's credentials are the executor's, for claiming and reporting: the handler
	// gets none (see worker.Program).
	if p, ok := h.(worker.Program); ok {
		p.WithoutAWSCredentials = true
		h = p
	}
	return Config{Env: env, Lambda: l, Handler: h, HandlersDir: *handlers, Prefetch: *prefetch, Drain: *drain,
		MetadataURI: getenv(EnvMetadata)}, nil
}

// Serve runs the lambda's tasks until ctx ends, then drains. stop restores the default signal
// handling, so a second signal ends the process at once.
func Serve(ctx context.Context, stop func(), cfg Config, log *slog.Logger) error {
	clients, err := awsfn.Open(ctx, cfg.Env, log)
	if err != nil {
		return err
	}
	logs, err := LogLocation(ctx, http.DefaultClient, cfg.MetadataURI)
	name := "" // the executor's default: its host and process id
	if err != nil {
		log.Warn("attempts will not say where their logs are", "err", err)
	} else {
		// Its stream names its ECS task (PREFIX/CONTAINER/TASK_ID), as a worker function's names
		// its execution environment; a store keeps it once, as worker and stream.
		name = logs.Stream
	}
	// In-process for now, on the table itself; the status function's client will take its place.
	st := awsfn.Status(cfg.Env, clients, log)
	ctl := controller.Start(controller.Config{
		Lambda: cfg.Lambda, Handler: cfg.Handler, Queue: clients.Queue,
		Executor: executor.New(st, executor.Config{
			Task: cfg.Env.Task, Logger: log, Metrics: clients.Metrics,
			Worker: name, LogLocation: logs, LogHandlerOutput: true,
		}),
		IdleWait: idleWait, Prefetch: cfg.Prefetch, Logger: log,
		// SQS keeps a message while it is hidden: its visibility times the lease.
		MessageTimesLease: true,
	})
	log.Info("executor is up", "lambda", cfg.Lambda.Name, "priorities", cfg.Lambda.Priorities,
		"concurrency", cfg.Lambda.Concurrency, "prefetch", cfg.Prefetch, "handlers", cfg.HandlersDir,
		"drain", cfg.Drain.String(), "table", cfg.Env.Table, "queue_prefix", cfg.Env.QueuePrefix, "logs", logs)

	<-ctx.Done()
	stop()
	log.Info("draining: no new tasks; running tasks may finish", "drain", cfg.Drain.String())
	begin := time.Now()
	drain, cancel := context.WithTimeout(context.Background(), cfg.Drain)
	defer cancel()
	ctl.Stop(drain)
	// The lifecycle events of the last writes (ATF_EVENT_BUS), in the time ECS leaves after the
	// drain (executorStopTimeout in infra).
	closing, cancelClose := context.WithTimeout(context.Background(), eventsCloseTimeout)
	defer cancelClose()
	if err := clients.Events.Close(closing); err != nil {
		log.Warn("lifecycle events not sent before the executor stopped", "err", err)
	}
	log.Info("executor stopped", "took", time.Since(begin).Round(time.Millisecond).String(), "drain_expired", drain.Err() != nil)
	return nil
}

// eventsCloseTimeout bounds the wait for the last lifecycle events at shutdown.
const eventsCloseTimeout = 5 * time.Second

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func setInt(p *int, s string) error {
	n, err := strconv.Atoi(s)
	if err == nil {
		*p = n
	}
	return err
}

func setDuration(p *time.Duration, s string) error {
	d, err := time.ParseDuration(s)
	if err == nil {
		*p = d
	}
	return err
}
