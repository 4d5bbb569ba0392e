package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverFetchCooldown is River's FetchCooldown for the run. Its default
// (100 ms) caps a queue at MaxWorkers jobs per 100 ms, 1,000/s at concurrency
// 100, whatever the database can do; River's own benchmark (cmd/river bench)
// uses 2 ms, with a 20 ms FetchPollInterval.
func riverFetchCooldown(defaults bool) time.Duration {
	if defaults {
		return river.FetchCooldownDefault
	}
	return 2 * time.Millisecond
}

// riverSchema holds River's tables; dropped and migrated afresh each run.
const riverSchema = "atf_bench_river"

type noopArgs struct{}

func (noopArgs) Kind() string { return "atf_bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	handled *counter
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.handled.inc()
	return nil
}

func runRiver(ctx context.Context, url string, w workload, defaults bool) (rate float64, pgVersion string, err error) {
	// Default pool settings, as in River's docs.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return 0, "", err
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion); err != nil {
		return 0, "", err
	}
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + riverSchema + " CASCADE", "CREATE SCHEMA " + riverSchema} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, "", err
		}
	}
	// River logs to stdout by default; stdout is for the JSON line.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: riverSchema, Logger: logger})
	if err != nil {
		return 0, "", err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, "", fmt.Errorf("migrate: %w", err)
	}

	handled := newCounter(w.tasks)
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{handled: handled})
	config := &river.Config{
		Logger:  logger,
		Schema:  riverSchema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w.concurrency}},
		Workers: workers,
	}
	if !defaults {
		config.FetchCooldown = riverFetchCooldown(false)
		config.FetchPollInterval = 20 * time.Millisecond
	}
	client, err := river.NewClient(driver, config)
	if err != nil {
		return 0, "", err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			log.Printf("river: stop: %v", err)
		}
	}()

	rate, err = measure(ctx, w, peer{
		name: "river",
		// One batch is one InsertManyFast (COPY FROM) call.
		insert: func(ctx context.Context, size int) error {
			params := make([]river.InsertManyParams, size)
			for i := range params {
				params[i].Args = noopArgs{}
			}
			_, err := client.InsertManyFast(ctx, params)
			return err
		},
		parallel: 1, // one batch after another: a round trip per batch is cheap
		start:    client.Start,
		handled:  handled,
		// River's completer marks jobs completed in batches, after the handler.
		confirm: func(ctx context.Context) (bool, error) {
			var completed, total int
			err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FROM "+riverSchema+".river_job").Scan(&completed, &total)
			if err == nil && total != w.tasks {
				err = fmt.Errorf("river_job holds %d jobs, want %d", total, w.tasks)
			}
			return completed == w.tasks, err
		},
	})
	return rate, pgVersion, err
}
