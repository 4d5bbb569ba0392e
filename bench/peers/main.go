// Command peers burns down the same no-op workload as atf's benchmark on River
// (Postgres) and on asynq (Redis), one after the other, and prints one JSON
// line with both rates. Start the servers with ./services start first.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"time"
)

// workload is what both peers run: tasks no-op jobs inserted in batches of
// batch, worked with concurrency workers.
type workload struct {
	tasks, concurrency, batch int
}

// batches splits tasks into batch sizes: full batches and a last partial one.
func (w workload) batches() []int {
	var out []int
	for left := w.tasks; left > 0; left -= w.batch {
		out = append(out, min(left, w.batch))
	}
	return out
}

type result struct {
	RiverTasksPerS  float64 `json:"river_tasks_per_s"`
	AsynqTasksPerS  float64 `json:"asynq_tasks_per_s"`
	Tasks           int     `json:"tasks"`
	Concurrency     int     `json:"concurrency"`
	Batch           int     `json:"batch"`
	RiverVersion    string  `json:"river_version"`
	RiverCooldown   string  `json:"river_fetch_cooldown"`
	AsynqVersion    string  `json:"asynq_version"`
	PostgresVersion string  `json:"postgres_version"`
	RedisVersion    string  `json:"redis_version"`
}

// timeout bounds each peer's run, so a stuck run fails instead of hanging.
const timeout = 5 * time.Minute

func main() {
	var w workload
	flag.IntVar(&w.tasks, "tasks", 10000, "number of no-op tasks")
	flag.IntVar(&w.concurrency, "concurrency", 100, "worker concurrency")
	flag.IntVar(&w.batch, "batch", 100, "tasks per insert batch")
	pgURL := flag.String("pg", os.Getenv("ATF_BENCH_PG"), "Postgres URL (default $ATF_BENCH_PG)")
	redisAddr := flag.String("redis", os.Getenv("ATF_BENCH_REDIS"), "Redis host:port (default $ATF_BENCH_REDIS)")
	riverDefaults := flag.Bool("river-defaults", false, "use River's default fetch timings (100 ms cooldown, 1 s poll), not those of River's own benchmark")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("peers: ")
	if w.tasks <= 0 || w.concurrency <= 0 || w.batch <= 0 {
		log.Fatal("-tasks, -concurrency and -batch must be positive")
	}
	if *pgURL == "" || *redisAddr == "" {
		log.Fatal("no servers: run `eval \"$(bench/peers/services start)\"` first, or pass -pg and -redis")
	}

	res := result{
		Tasks: w.tasks, Concurrency: w.concurrency, Batch: w.batch,
		RiverVersion: moduleVersion("github.com/riverqueue/river"),
		AsynqVersion: moduleVersion("github.com/hibiken/asynq"),
	}
	res.RiverCooldown = riverFetchCooldown(*riverDefaults).String()
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	res.RiverTasksPerS, res.PostgresVersion, err = runRiver(ctx, *pgURL, w, *riverDefaults)
	cancel()
	if err != nil {
		log.Fatalf("river: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	res.AsynqTasksPerS, res.RedisVersion, err = runAsynq(ctx, *redisAddr, w)
	cancel()
	if err != nil {
		log.Fatalf("asynq: %v", err)
	}

	line, err := json.Marshal(res)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(line))
}

// moduleVersion is the version of a dependency as built into this binary.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}
