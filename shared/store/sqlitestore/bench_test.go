package sqlitestore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
)

// BenchmarkStore: claim and due sweep on the embedded store (make bench; benchstat compares runs).
func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) task.Store {
		s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// BenchmarkDueBacklog: the consumer's due queries on a lambda with a backlog of 100,000 waiting
// tasks of its default priority, all due, and a few running ones not yet due: the timeout sweep
// (Running), a sweep of the backlog's priority up to the quota (Backlog) and of another priority
// (Other). Each reads at most its limit of tasks, however long the backlog.
func BenchmarkDueBacklog(b *testing.B) {
	ctx := b.Context()
	s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l := task.Lambda{Name: "backlog"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	const backlog, running = 100_000, 100
	for i := 0; i < backlog+running; i += task.MaxBatch {
		batch := make([]task.Task, task.MaxBatch)
		for j := range batch {
			t, err := task.New(task.Spec{ID: fmt.Sprintf("t%07d", i+j)}, l, now.Add(-time.Hour), cfg)
			if err == nil && i >= backlog {
				if t, err = task.Enqueue(t, now, cfg); err == nil {
					t, err = task.Claim(t, task.NewLease(), now, cfg)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			batch[j] = t
		}
		if err := s.CreateBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	ready := []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued}
	for _, c := range []struct {
		name string
		p    task.DueParams
		want int
	}{
		{"Running", task.DueParams{Statuses: task.Running}, 0},
		{"Backlog", task.DueParams{Statuses: ready, Priority: l.DefaultPriority()}, cfg.EnqueueQuota},
		{"Other", task.DueParams{Statuses: ready, Priority: l.Priorities[0]}, 0},
	} {
		c.p.Lambda, c.p.Before, c.p.Limit = l.Name, now, cfg.EnqueueQuota
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				due, err := s.Due(ctx, c.p)
				if err != nil {
					b.Fatal(err)
				}
				if len(due) != c.want {
					b.Fatalf("%d due, want %d", len(due), c.want)
				}
			}
		})
	}
}

// BenchmarkPrunePass: one pass of the pruning job, DefaultPruneBatch expired finished tasks
// deleted in one transaction (make bench): how long it holds the writer.
func BenchmarkPrunePass(b *testing.B) {
	ctx := b.Context()
	s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ended := time.Now().Add(-48 * time.Hour).UTC()
	fill := func(from int) {
		for i := 0; i < DefaultPruneBatch; i += task.MaxBatch {
			batch := make([]task.Task, task.MaxBatch)
			for j := range batch {
				batch[j] = task.Task{Lambda: "prune", ID: fmt.Sprintf("t%09d", from+i+j), Priority: "default", Status: task.StatusSuccess,
					MaxAttempts: 3, RunAt: ended, CreatedAt: ended, UpdatedAt: ended, Version: 4, Spec: "spec", Payload: []byte(`{"n":1}`)}
			}
			if err := s.CreateBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	next := 0
	for b.Loop() {
		b.StopTimer()
		fill(next)
		next += DefaultPruneBatch
		b.StartTimer()
		if n, err := s.Prune(ctx, time.Now().Add(-24*time.Hour), DefaultPruneBatch); err != nil || n != DefaultPruneBatch {
			b.Fatalf("pruned %d (%v), want %d", n, err, DefaultPruneBatch)
		}
	}
}

// BenchmarkWriterPath: the group writer's work per task on its happy path, one op a task: its
// create, enqueue, claim and success, each written for a batch of writerChunk tasks in one
// commit, as the API's batch create, the consumer's pass, the status.Claimer and the
// status.Completer write them (the transitions through the unsynced view). The transitions are
// computed with the timer stopped: what is timed is the store's part. cpu-ns/op is the process's
// CPU time over the timed part (the writer's, mostly), steadier than ns/op on a shared machine.
func BenchmarkWriterPath(b *testing.B) {
	ctx := b.Context()
	s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l := task.Lambda{Name: "writer"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	const writerChunk = 100
	step := func(tasks []task.Task, next func(task.Task) (task.Task, error)) []task.Versioned {
		ws := make([]task.Versioned, len(tasks))
		for i, t := range tasks {
			n, err := next(t)
			if err != nil {
				b.Fatal(err)
			}
			ws[i], tasks[i] = task.Versioned{Task: n, Prev: t.Version}, n
		}
		return ws
	}
	write := func(ws []task.Versioned) {
		for _, err := range s.Unsynced().UpdateMany(ctx, ws) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += writerChunk {
		b.StopTimer()
		now := time.Now().UTC()
		lease := task.NewLease()
		tasks := make([]task.Task, min(writerChunk, b.N-done))
		for i := range tasks {
			if tasks[i], err = task.New(task.Spec{ID: fmt.Sprintf("w%09d", done+i)}, l, now, cfg); err != nil {
				b.Fatal(err)
			}
		}
		created := slices.Clone(tasks)
		enqueued := step(tasks, func(t task.Task) (task.Task, error) { return task.Enqueue(t, now, cfg) })
		claimed := step(tasks, func(t task.Task) (task.Task, error) { return task.Claim(t, lease, now, cfg) })
		ended := step(tasks, func(t task.Task) (task.Task, error) {
			return task.Succeed(t, lease, json.RawMessage(`{}`), now, cfg)
		})
		b.StartTimer()
		before := processCPU(b)
		if err := s.CreateBatch(ctx, created); err != nil {
			b.Fatal(err)
		}
		write(enqueued)
		write(claimed)
		write(ended)
		cpu += processCPU(b) - before
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
