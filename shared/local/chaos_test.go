package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/awstest"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/history"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/memqueue"
	"github.com/openatf/atf/shared/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// duplicating is a queue that delivers every message with 0 to 3 extra copies, and now and then
// a message for a task that has already finished: scenario (d) of the guarantees.
type duplicating struct {
	task.Queue
	mu       sync.Mutex
	finished []task.Message
	copies   int
}

func (q *duplicating) Send(ctx context.Context, msgs ...task.Message) error {
	var out []task.Message
	q.mu.Lock()
	for _, m := range msgs {
		for range 1 + rand.IntN(4) {
			out = append(out, m)
		}
		if len(q.finished) > 0 && rand.IntN(4) == 0 {
			out = append(out, q.finished[rand.IntN(len(q.finished))])
		}
		q.finished = append(q.finished, m)
	}
	q.copies += len(out) - len(msgs)
	q.mu.Unlock()
	return q.Queue.Send(ctx, out...)
}

// recorder is a handler that records its executions.
type recorder struct {
	mu    sync.Mutex
	execs []history.Execution
}

func (r *recorder) Handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	e := history.Execution{Task: t.ID, Attempt: t.Attempt, Worker: "1", Start: time.Now()}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	e.End, e.Outcome = time.Now(), "success"
	r.mu.Lock()
	r.execs = append(r.execs, e)
	r.mu.Unlock()
	return nil, nil
}

// testDuplicates runs n tasks through a queue that duplicates its messages. Exactly one claim of
// each task may win: every task runs once, and nothing else is violated.
func testDuplicates(t *testing.T, n int, store task.Store, queue task.Queue) {
	rec := &recorder{}
	mux := worker.NewMux()
	mux.Handle("dup", rec)
	dq := &duplicating{Queue: queue}
	s, err := local.Start(t.Context(), local.Config{
		Addr: "127.0.0.1:0", Mux: mux, Store: store, Queue: dq, Concurrency: 8,
		Task:   task.Config{PollInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	for i := range n {
		if _, _, err := c.Schedule(t.Context(), "dup", client.ScheduleRequest{ID: fmt.Sprintf("d-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var finals []history.Final
	for deadline := time.Now().Add(2*time.Minute + time.Duration(n)*50*time.Millisecond); ; time.Sleep(100 * time.Millisecond) {
		finals = finals[:0]
		done := 0
		for p := (task.ListParams{Lambda: "dup", Limit: task.MaxListLimit}); ; {
			tasks, next, err := c.List(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range tasks {
				finals = append(finals, history.Final{ID: tk.ID, Status: tk.Status, Attempts: tk.Attempts, MaxAttempts: tk.MaxAttempts})
				if tk.Status.Terminal() {
					done++
				}
			}
			if p.Cursor = next; next == "" {
				break
			}
		}
		if done == n || time.Now().After(deadline) {
			break
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := history.Check(rec.execs, nil, nil, finals, task.StatusSuccess)
	fmt.Printf("chaos duplicates (%s): %s extra_messages=%d\n", t.Name(), r.Summary(), dq.copies)
	if !r.OK() || r.Duplicates != 0 || r.Tasks != n || dq.copies == 0 {
		t.Errorf("%s extra_messages=%d: want every task run exactly once\nlost %v\noverlaps %v", r.Summary(), dq.copies, r.Lost, r.Overlaps)
	}
}

// chaosTasks is short tasks, or under `make chaos` its ATF_CHAOS_TASKS divided by div: the
// emulators run tasks far slower than the embedded backend (moto serves a few hundred
// requests a second, and each task takes about ten).
func chaosTasks(short, div int) int {
	if n, err := strconv.Atoi(os.Getenv("ATF_CHAOS_TASKS")); err == nil && n > 0 {
		return max(n/div, 1)
	}
	return short
}

// TestChaosDuplicates: scenario (d) on the embedded store and the in-process queue.
func TestChaosDuplicates(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	testDuplicates(t, chaosTasks(500, 1), store, memqueue.New())
}

// TestChaosDuplicatesAWS: scenario (d) on DynamoDB and SQS.
func TestChaosDuplicatesAWS(t *testing.T) {
	b := awstest.NewBackend(t, "atf-dup", task.Lambda{Name: "dup"}.WithDefaults())
	testDuplicates(t, min(chaosTasks(100, 100), 200), b.Store, b.Queue)
}
