// Command executor is the ECS executor of one lambda, the container main of its ECS service. A
// controller long-polls the lambda's SQS queues in priority order into a small priority buffer,
// and Concurrency executors run the lambda's handler, a program in the handlers folder (any
// executable, or a Go handler built with worker.Main), claiming each task first.
//
// On SIGTERM (what ECS sends before it stops a task) or SIGINT it drains: it stops receiving,
// hands its buffered messages back to their queues at once, lets running tasks finish until the
// drain timeout, then stops them and releases their tasks for another executor, and exits 0. Keep
// the drain below the container's stopTimeout (at most 120 s on ECS), so the release happens
// before ECS sends SIGKILL. A second signal ends the process at once; its running tasks then
// come back through their heartbeat timeouts.
//
// Configuration, from the environment the stack sets (see package awsfn): ATF_TABLE,
// ATF_QUEUE_PREFIX, ATF_SHARDS, ATF_LAMBDAS, ATF_HEARTBEAT, and ATF_LAMBDA, the lambda it serves
// (required). Its own settings are flags, each defaulting to an environment variable:
//
//	-handlers DIR    ATF_HANDLERS     the handlers folder [/opt/atf/handlers]; the program named
//	                                  after the lambda (without extension) is its handler
//	-concurrency N   ATF_CONCURRENCY  tasks run at once [the lambda's concurrency in ATF_LAMBDAS]
//	-prefetch N      ATF_PREFETCH     messages held beyond the free slots [concurrency, at most 10]
//	-drain D         ATF_DRAIN        how long running tasks may finish after SIGTERM [100s]
//
// Logs are JSON lines on stderr.
//
// Handlers run in process groups of their own, so a signal to the container's first process
// reaches the executor alone, and a stopped handler is killed with everything it started. As the
// first process the executor does not reap orphaned grandchildren of handlers: run the container
// with an init process (initProcessEnabled in the ECS task definition) if handlers leave any.
//
// Handlers start without the AWS credential variables of the executor's environment
// (worker.CredentialVars: on ECS, the task role's credentials endpoint), so the role that claims
// and reports the lambda's tasks is not the handler's to use.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
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

// config is everything the executor needs, read once at start-up.
type config struct {
	env         awsfn.Env
	lambda      task.Lambda // with Concurrency set
	handler     worker.Handler
	handlersDir string
	prefetch    int
	drain       time.Duration
}

func main() {
	log := awsfn.Logger()
	cfg, err := load(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		log.Error("executor cannot start", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, stop, cfg, log); err != nil {
		log.Error("executor failed", "err", err)
		os.Exit(1)
	}
}

// load reads the configuration from flags, the environment, and the handlers folder.
func load(args []string, getenv func(string) string, usage io.Writer) (config, error) {
	env, err := awsfn.ParseEnv(getenv)
	if err != nil {
		return config{}, err
	}
	if env.Lambda == "" {
		return config{}, fmt.Errorf("%s is not set: name the lambda this executor runs", awsfn.EnvLambda)
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
				return config{}, fmt.Errorf("%s=%q: %w", v.name, s, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("executor takes no arguments, got %q", fs.Args())
	}
	switch {
	case *concurrency < 0:
		return config{}, fmt.Errorf("concurrency must not be negative, got %d", *concurrency)
	case *prefetch < -1:
		return config{}, fmt.Errorf("prefetch must be at least 0 (or -1 for the default), got %d", *prefetch)
	case *drain <= 0:
		return config{}, fmt.Errorf("drain must be positive, got %s", *drain)
	}
	if *concurrency > 0 {
		l.Concurrency = *concurrency
	}
	if *prefetch == -1 {
		*prefetch = min(l.Concurrency, controller.MaxReceive)
	}

	mux := worker.NewMux()
	if _, err := mux.HandleDir(*handlers); err != nil {
		return config{}, err
	}
	h, ok := mux.Handler(l.Name)
	if !ok {
		return config{}, fmt.Errorf("no handler for lambda %s in %s: want an executable file named %s (with any extension)", l.Name, *handlers, l.Name)
	}
	// The task role's credentials are the executor's, for claiming and reporting: the handler
	// gets none (see worker.Program).
	if p, ok := h.(worker.Program); ok {
		p.WithoutAWSCredentials = true
		h = p
	}
	return config{env: env, lambda: l, handler: h, handlersDir: *handlers, prefetch: *prefetch, drain: *drain}, nil
}

// serve runs the lambda's tasks until ctx ends, then drains. stop restores the default signal
// handling, so a second signal ends the process at once.
func serve(ctx context.Context, stop func(), cfg config, log *slog.Logger) error {
	clients, err := awsfn.Open(ctx, cfg.env, log)
	if err != nil {
		return err
	}
	// In-process for now, on the table itself; the status function's client will take its place.
	st := awsfn.Status(cfg.env, clients, log)
	ctl := controller.Start(controller.Config{
		Lambda: cfg.lambda, Handler: cfg.handler, Queue: clients.Queue, Status: st,
		Executor: executor.New(st, executor.Config{Task: cfg.env.Task, Logger: log}),
		IdleWait: idleWait, Prefetch: cfg.prefetch, Logger: log,
	})
	log.Info("executor is up", "lambda", cfg.lambda.Name, "priorities", cfg.lambda.Priorities,
		"concurrency", cfg.lambda.Concurrency, "prefetch", cfg.prefetch, "handlers", cfg.handlersDir,
		"drain", cfg.drain.String(), "table", cfg.env.Table, "queue_prefix", cfg.env.QueuePrefix)

	<-ctx.Done()
	stop()
	log.Info("draining: no new tasks; running tasks may finish", "drain", cfg.drain.String())
	begin := time.Now()
	drain, cancel := context.WithTimeout(context.Background(), cfg.drain)
	defer cancel()
	ctl.Stop(drain)
	log.Info("executor stopped", "took", time.Since(begin).Round(time.Millisecond).String(), "drain_expired", drain.Err() != nil)
	return nil
}

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
