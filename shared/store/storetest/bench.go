package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Benchmark measures a store's hot paths, the same way for every backend, in benchstat's format:
//
//   - Claim: read an enqueued task and move it to claimed with a conditional write (task.Apply,
//     as the status controller does), one claim at a time;
//   - ClaimParallel: the same from many goroutines at once, as a worker's slots claim;
//   - DueSweep: one consumer query for a priority's due tasks, up to the enqueue quota, among
//     as many tasks that are not due yet.
//
// Each run works on a lambda of its own in one store.
func Benchmark(b *testing.B, newStore func(b *testing.B) task.Store) {
	s := newStore(b)
	b.Run("Claim", func(b *testing.B) { benchClaim(b, s, false) })
	b.Run("ClaimParallel", func(b *testing.B) { benchClaim(b, s, true) })
	b.Run("DueSweep", func(b *testing.B) { benchDue(b, s) })
}

// enqueuedTasks creates n enqueued tasks of a new lambda, in batches.
func enqueuedTasks(b *testing.B, s task.Store, n int) (task.Lambda, []task.Task) {
	ctx := context.Background()
	l := task.Lambda{Name: lambdaName()}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := base()
	tasks := make([]task.Task, 0, n)
	for len(tasks) < n {
		batch := make([]task.Task, min(task.MaxBatch, n-len(tasks)))
		for i := range batch {
			t, err := task.New(task.Spec{ID: fmt.Sprintf("b%07d", len(tasks)+i)}, l, now, cfg)
			if err == nil {
				t, err = task.Enqueue(t, now, cfg) // stored as it would be after the sweep
			}
			if err != nil {
				b.Fatal(err)
			}
			batch[i] = t
		}
		if err := s.CreateBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		tasks = append(tasks, batch...)
	}
	return l, tasks
}

func benchClaim(b *testing.B, s task.Store, parallel bool) {
	ctx := context.Background()
	cfg := task.Config{}.WithDefaults()
	l, tasks := enqueuedTasks(b, s, b.N)
	claim := func(t task.Task) {
		_, err := task.Apply(ctx, s, l.Name, t.ID, func(t task.Task) (task.Task, error) {
			return task.Claim(t, task.NewLease(), time.Now().UTC(), cfg)
		})
		if err != nil {
			b.Error(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for _, t := range tasks {
			claim(t)
		}
		return
	}
	var next atomic.Int64
	b.SetParallelism(8) // 8 × GOMAXPROCS claimers, as a worker's slots
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			claim(tasks[next.Add(1)-1])
		}
	})
}

func benchDue(b *testing.B, s task.Store) {
	ctx := context.Background()
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: lambdaName()}.WithDefaults()
	now := base()
	// quota tasks due now, and as many due in an hour.
	for _, at := range []time.Time{now, now.Add(time.Hour)} {
		for i := 0; i < cfg.EnqueueQuota; i += task.MaxBatch {
			batch := make([]task.Task, task.MaxBatch)
			for j := range batch {
				t, err := task.New(task.Spec{RunAt: ptr(at)}, l, now, cfg)
				if err != nil {
					b.Fatal(err)
				}
				batch[j] = t
			}
			if err := s.CreateBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	p := task.DueParams{
		Lambda: l.Name, Priority: l.DefaultPriority(), Before: now.Add(time.Second), Limit: cfg.EnqueueQuota,
		Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued},
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		due, err := s.Due(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(due) != cfg.EnqueueQuota {
			b.Fatalf("%d due, want %d", len(due), cfg.EnqueueQuota)
		}
	}
	b.ReportMetric(float64(cfg.EnqueueQuota), "tasks/op")
}
