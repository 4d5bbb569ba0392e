package local_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/worker"
)

// Periodic schedules end to end: atf dev stacks fire a rate(2s) schedule, on the embedded store
// and on the emulated DynamoDB and SQS (two stacks on one table there).

// runs records the executions of a lambda's tasks: when each task id ran, every time it did.
type runs struct {
	mu  sync.Mutex
	ran map[string][]time.Time
}

func (r *runs) mux(lambda string) *worker.Mux {
	mux := worker.NewMux()
	mux.HandleFunc(lambda, func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ran == nil {
			r.ran = map[string][]time.Time{}
		}
		r.ran[tk.ID] = append(r.ran[tk.ID], time.Now())
		return nil, nil
	})
	return mux
}

// firings returns the fire times of the tasks that ran, each once, and fails on a task run twice.
func (r *runs) firings(t *testing.T, schedule string) []time.Time {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var fires []time.Time
	for id, at := range r.ran {
		stamp, ok := strings.CutPrefix(id, schedule+":")
		if !ok {
			t.Errorf("task %s is not a firing of %s", id, schedule)
			continue
		}
		stamp, _, _ = strings.Cut(stamp, ".") // the incarnation's tag
		fire, err := time.Parse("20060102T150405Z", stamp)
		if err != nil {
			t.Fatal(err)
		}
		if len(at) > 1 {
			t.Errorf("firing %s ran %d times", id, len(at))
		}
		t.Logf("firing %s ran %s after its time", id, at[0].Sub(fire).Round(time.Millisecond))
		fires = append(fires, fire)
	}
	slices.SortFunc(fires, time.Time.Compare)
	return fires
}

// waitFirings waits until n firings have run, at most until deadline.
func (r *runs) waitFirings(n int, deadline time.Time) int {
	for {
		r.mu.Lock()
		got := len(r.ran)
		r.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firingSlack is how late a firing may run in these tests: the target is 1 s at p95 (bench), the
// tests run on machines other suites load, on emulators that serve a few hundred requests a second.
const firingSlack = 3 * time.Second

// checkRate: a rate(2s) schedule created at created fires every 2 s from created+2s (whole
// seconds), n times in n × 2 s, each once.
func checkRate(t *testing.T, r *runs, sc task.Schedule, n int) {
	t.Helper()
	first := sc.NextFires[0]
	last := first.Add(time.Duration(n-1) * 2 * time.Second)
	if got := r.waitFirings(n, last.Add(firingSlack)); got < n {
		t.Fatalf("%d firings ran by %s after the last's time, want %d", got, firingSlack, n)
	}
	fires := r.firings(t, sc.ID)
	for i, f := range fires[:n] {
		if want := first.Add(time.Duration(i) * 2 * time.Second); !f.Equal(want) {
			t.Fatalf("firing %d at %s, want %s: firings %v", i, f, want, fires)
		}
	}
}

func createRate(t *testing.T, c *client.Client, lambda string, spec task.ScheduleSpec) task.Schedule {
	t.Helper()
	if spec.Rate == "" {
		spec.Rate = "2s"
	}
	sc, created, err := c.CreateSchedule(t.Context(), lambda, spec)
	if err != nil || !created {
		t.Fatalf("create schedule: %v (created %v)", err, created)
	}
	return sc
}

// pauseQuiet pauses the schedule and checks that nothing fires in the 4 s after.
func pauseQuiet(t *testing.T, c *client.Client, r *runs, lambda, id string) {
	t.Helper()
	if _, err := c.PauseSchedule(t.Context(), lambda, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(firingSlack) // what was fired before the pause may still run
	r.mu.Lock()
	before := len(r.ran)
	r.mu.Unlock()
	time.Sleep(4 * time.Second)
	r.mu.Lock()
	after := len(r.ran)
	r.mu.Unlock()
	if after != before {
		t.Fatalf("a paused schedule fired: %d tasks ran, then %d", before, after)
	}
}

func TestScheduleEmbedded(t *testing.T) {
	t.Parallel()
	r := &runs{}
	c := chaostest.Start(t, local.Config{Mux: r.mux("tick"), DBPath: filepath.Join(t.TempDir(), "atf.db"), Task: chaostest.Timing(false)})
	sc := createRate(t, c, "tick", task.ScheduleSpec{ID: "every-2s"})
	checkRate(t, r, sc, 4)
	pauseQuiet(t, c, r, "tick", sc.ID)
}

// TestScheduleTwoStacksOneTable: two atf dev processes on one DynamoDB table fire the schedule
// once per firing between them.
func TestScheduleTwoStacksOneTable(t *testing.T) {
	t.Parallel()
	b := awstest.NewBackend(t, "atf-sched", task.Lambda{Name: "tick"}.WithDefaults())
	second, err := dynamostore.New(b.DB, dynamostore.Config{Table: b.Name})
	if err != nil {
		t.Fatal(err)
	}
	r := &runs{}
	c := chaostest.Start(t, local.Config{Mux: r.mux("tick"), Store: b.Store, Queue: b.Queue, Task: chaostest.Timing(true)})
	chaostest.Start(t, local.Config{Mux: r.mux("tick"), Store: second, Queue: b.Queue, Task: chaostest.Timing(true)})
	sc := createRate(t, c, "tick", task.ScheduleSpec{ID: "every-2s"})
	checkRate(t, r, sc, 4)
	pauseQuiet(t, c, r, "tick", sc.ID)
	tasks, _, err := c.List(t.Context(), task.ListParams{Lambda: "tick", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	ran := len(r.ran)
	r.mu.Unlock()
	if len(tasks) != ran {
		t.Fatalf("%d tasks, %d ran", len(tasks), ran)
	}
}

// TestScheduleCatchUpAfterStop: a stack stopped for 10 s fires on its start again what its
// schedule's catch-up says: the latest missed firing (skip), or each (all); on the embedded store
// (the same file opened again) and on one emulated DynamoDB table.
func TestScheduleCatchUpAfterStop(t *testing.T) {
	for _, aws := range []bool{false, true} {
		for _, tc := range []struct {
			catchUp string
			missed  int // firings run for the 10 s stop
		}{{task.CatchUpSkip, 1}, {task.CatchUpAll, 5}} {
			name := tc.catchUp
			if aws {
				name += "/aws"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := &runs{}
				cfg := local.Config{Addr: "127.0.0.1:0", Mux: r.mux("tick"), Task: chaostest.Timing(aws), Logger: slog.New(slog.DiscardHandler)}
				if aws {
					b := awstest.NewBackend(t, "atf-catchup", task.Lambda{Name: "tick"}.WithDefaults())
					cfg.Store, cfg.Queue = b.Store, b.Queue
				} else {
					cfg.DBPath = filepath.Join(t.TempDir(), "atf.db")
				}
				testCatchUp(t, r, cfg, tc.catchUp, tc.missed)
			})
		}
	}
}

func testCatchUp(t *testing.T, r *runs, cfg local.Config, catchUp string, wantMissed int) {
	s, err := local.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	sc := createRate(t, c, "tick", task.ScheduleSpec{ID: "c", CatchUp: catchUp})
	r.waitFirings(1, sc.NextFires[0].Add(firingSlack))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.Stop(ctx)
	cancel()
	r.mu.Lock()
	before := len(r.ran)
	r.mu.Unlock()
	stopped := time.Now()
	time.Sleep(10 * time.Second)
	s, err = local.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	restarted := time.Now()
	// The firings due while stopped, then a second for any more that should not come.
	r.waitFirings(before+wantMissed, restarted.Add(firingSlack))
	time.Sleep(time.Second)
	var missed int
	for _, f := range r.firings(t, sc.ID) {
		if f.After(stopped) && !f.After(restarted) {
			missed++
		}
	}
	if missed != wantMissed {
		t.Fatalf("%s: %d firings of the stop ran, want %d", catchUp, missed, wantMissed)
	}
}
