package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// peer is one system under test, set up fresh and with its workers not yet
// started.
type peer struct {
	name string
	// insert inserts one batch of size no-op tasks.
	insert func(ctx context.Context, size int) error
	// parallel is how many goroutines insert batches at once.
	parallel int
	// start starts the workers.
	start func(ctx context.Context) error
	// handled counts the handler's runs.
	handled *counter
	// confirm asks the system itself whether all tasks are completed.
	confirm func(ctx context.Context) (bool, error)
}

// counter counts handler runs and closes done at the n-th.
type counter struct {
	n     int64
	count atomic.Int64
	done  chan struct{}
}

func newCounter(n int) *counter { return &counter{n: int64(n), done: make(chan struct{})} }

func (c *counter) inc() {
	if c.count.Add(1) == c.n {
		close(c.done)
	}
}

// measure burns down the workload on p and returns tasks per second over the
// wall time from the first insert to the last completion, as the system itself
// reports it. All batches go in first, then the workers start on the full
// queue: so neither figure depends on an idle poll of an empty queue (asynq
// sleeps about a second when it finds one, River polls every FetchPollInterval).
func measure(ctx context.Context, w workload, p peer) (float64, error) {
	log.Printf("%s: %d tasks, concurrency %d, batches of %d", p.name, w.tasks, w.concurrency, w.batch)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.parallel)
	for _, size := range w.batches() {
		g.Go(func() error { return p.insert(gctx, size) })
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	inserted := time.Now()
	if err := p.start(ctx); err != nil {
		return 0, fmt.Errorf("start workers: %w", err)
	}
	select {
	case <-p.handled.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("handler ran %d of %d times: %w", p.handled.count.Load(), w.tasks, ctx.Err())
	}
	// Handlers ran N times; stop the clock once the system agrees.
	for {
		ok, err := p.confirm(ctx)
		if err != nil {
			return 0, fmt.Errorf("confirm: %w", err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("confirm: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	wall := time.Since(start)
	if n := p.handled.count.Load(); n != int64(w.tasks) {
		return 0, fmt.Errorf("handler ran %d times for %d tasks", n, w.tasks)
	}
	rate := float64(w.tasks) / wall.Seconds()
	log.Printf("%s: inserted in %.2fs, all done in %.2fs: %.0f tasks/s",
		p.name, inserted.Sub(start).Seconds(), wall.Seconds(), rate)
	return rate, nil
}
