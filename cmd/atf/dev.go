package main

import (
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

	"github.com/openatf/atf/shared/frontend"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
)

// devPoll is the consumer's poll interval under atf dev: a local sweep costs one SQLite query
// per lambda and priority, so it can run far more often than the AWS default.
const devPoll = 100 * time.Millisecond

func dev(args []string) error {
	fs := flag.NewFlagSet("atf dev", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "API listen address")
	db := fs.String("db", ".atf/atf.db", "SQLite database file")
	handlers := fs.String("handlers", "", "folder of executable handlers, one lambda per file")
	concurrency := fs.Int("concurrency", task.DefaultConcurrency, "tasks run at once per lambda")
	timeout := fs.Duration("timeout", task.DefaultHandlerTimeout, "handler timeout; a program that outlives it is killed")
	poll := fs.Duration("poll", devPoll, "how often the consumer sweeps for due tasks")
	grace := fs.Duration("grace", 10*time.Second, "on shutdown, how long running tasks may finish before they are stopped and released")
	heartbeat := fs.Duration("heartbeat", task.DefaultHeartbeatInterval, "heartbeat interval (the heartbeat timeout is 6 times it)")
	maxAttempts := fs.Int("max-attempts", task.DefaultMaxAttempts, "default max attempts of a task")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stack, err := local.Start(ctx, local.Config{
		Addr: *addr, DBPath: *db, HandlersDir: *handlers, Concurrency: *concurrency, Timeout: *timeout,
		Task: task.Config{
			PollInterval: *poll, HeartbeatInterval: *heartbeat, HeartbeatTimeout: 6 * *heartbeat,
			ClaimTimeout: 6 * *heartbeat, MaxAttempts: *maxAttempts,
		},
		Logger: log,
	})
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

func printLambdas(w io.Writer, v any) error {
	ls, ok := v.([]frontend.LambdaInfo)
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
