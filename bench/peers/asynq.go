package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqQueue = "default"

func runAsynq(ctx context.Context, addr string, w workload) (rate float64, redisVersion string, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, "", err
	}
	redisVersion = infoField(info, "redis_version")
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return 0, "", err
	}

	opt := asynq.RedisClientOpt{Addr: addr}
	client := asynq.NewClient(opt)
	defer client.Close()
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()

	handled := newCounter(w.tasks)
	mux := asynq.NewServeMux()
	mux.HandleFunc("atf_bench:noop", func(context.Context, *asynq.Task) error {
		handled.inc()
		return nil
	})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: w.concurrency, LogLevel: asynq.WarnLevel})
	defer srv.Shutdown()

	rate, err = measure(ctx, w, peer{
		name: "asynq",
		// asynq has no batch insert: a batch is size Enqueue calls (one round
		// trip each), and batches go from `concurrency` goroutines at once.
		insert: func(ctx context.Context, size int) error {
			for range size {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("atf_bench:noop", nil)); err != nil {
					return err
				}
			}
			return nil
		},
		parallel: w.concurrency,
		start:    func(context.Context) error { return srv.Start(mux) },
		handled:  handled,
		// asynq marks a task done after its handler returns.
		confirm: func(context.Context) (bool, error) {
			q, err := inspector.GetQueueInfo(asynqQueue)
			if err == nil && q.FailedTotal != 0 {
				err = fmt.Errorf("%d tasks failed", q.FailedTotal)
			}
			return err == nil && q.Size == 0 && q.ProcessedTotal == w.tasks, err
		},
	})
	return rate, redisVersion, err
}

// infoField reads one "key:value" line of Redis's INFO reply.
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return v
		}
	}
	return "unknown"
}
