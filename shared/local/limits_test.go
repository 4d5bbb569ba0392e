package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/worker"
)

// concurrent counts the tasks a handler runs at once, in all and per key, and the most it saw.
type concurrent struct {
	mu            sync.Mutex
	now, most     int
	byKey, keyMax map[string]int
	by            map[string]int // tasks run, by who ran them
}

func newConcurrent() *concurrent {
	return &concurrent{byKey: map[string]int{}, keyMax: map[string]int{}, by: map[string]int{}}
}

// handler runs a task of key payload.key for d, counted as run by who.
func (r *concurrent) handler(who string, d time.Duration) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, tk worker.Task) (json.RawMessage, error) {
		var p struct{ Key string }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.now++
		r.most = max(r.most, r.now)
		r.byKey[p.Key]++
		r.keyMax[p.Key] = max(r.keyMax[p.Key], r.byKey[p.Key])
		r.by[who]++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.now--
			r.byKey[p.Key]--
			r.mu.Unlock()
		}()
		select {
		case <-time.After(d):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// limitedOn starts atf dev serving lambda "work", its registry entry's fields js, run by h, on
// DynamoDB and SQS (the emulators) if onAWS.
func limitedOn(t *testing.T, js string, h worker.Handler, onAWS bool) *client.Client {
	t.Helper()
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "work", ` + js + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mux := worker.NewMux()
	mux.Handle("work", h)
	cfg := local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux, Registry: reg,
		Task: task.Config{PollInterval: 50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if onAWS {
		b := awstest.NewBackend(t, "atf-limits", reg.Lambdas[0].Lambda().WithDefaults())
		cfg.DBPath, cfg.Store, cfg.Queue = "", b.Store, b.Queue
	}
	s, err := local.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return &client.Client{Endpoint: "http://" + s.Addr()}
}

// scheduleKeyed schedules n tasks of lambda work, task i of key keys[i % len(keys)] (none if
// keys is empty), and returns their ids.
func scheduleKeyed(t *testing.T, c *client.Client, n int, keys ...string) []string {
	t.Helper()
	var reqs []client.ScheduleRequest
	for i := range n {
		key := ""
		if len(keys) > 0 {
			key = keys[i%len(keys)]
		}
		reqs = append(reqs, client.ScheduleRequest{ID: fmt.Sprint("t-", i), Key: key, Payload: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key))})
	}
	tasks, _, err := c.ScheduleBatch(t.Context(), "work", reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = tk.ID
	}
	return ids
}

// succeedOnce waits for every task of ids to succeed, each at its first attempt: a hold counts
// none.
func succeedOnce(t *testing.T, c *client.Client, ids []string) {
	t.Helper()
	for _, id := range ids {
		got, err := c.Wait(t.Context(), "work", id)
		if err != nil || got.Status != task.StatusSuccess || got.Attempts != 1 {
			t.Fatalf("task %s: %s after %d attempts (%v), want success at the first", id, got.Status, got.Attempts, err)
		}
	}
}

// TestKeyConcurrencyLimit is issue 32's acceptance on atf dev: with key_concurrency 1 and
// concurrency 4, no two tasks of one key ever run at once, and tasks of other keys run alongside.
func TestKeyConcurrencyLimit(t *testing.T) { testKeyConcurrencyLimit(t, false) }

// TestKeyConcurrencyLimitAWS is the same on DynamoDB and SQS: the store's limit records in one
// transaction with the claim, held messages hidden on SQS.
func TestKeyConcurrencyLimitAWS(t *testing.T) { testKeyConcurrencyLimit(t, true) }

func testKeyConcurrencyLimit(t *testing.T, onAWS bool) {
	r := newConcurrent()
	c := limitedOn(t, `"concurrency": 4, "key_concurrency": 1`, r.handler("dev", 100*time.Millisecond), onAWS)
	ids := scheduleKeyed(t, c, 12, "a", "b", "c")
	succeedOnce(t, c, ids)
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, most := range r.keyMax {
		if most != 1 {
			t.Errorf("key %s: %d tasks ran at once, want 1", key, most)
		}
	}
	if r.most < 2 {
		t.Errorf("at most %d task ran at once, want tasks of other keys alongside", r.most)
	}
	t.Logf("at most %d tasks ran at once", r.most)
}

// TestRateLimit is issue 32's acceptance on atf dev: with rate "5/s" the starts of 30 tasks,
// as the store recorded them, spread over 29 intervals of 200 ms at least.
func TestRateLimit(t *testing.T) { testRateLimit(t, false) }

// TestRateLimitAWS is the same on DynamoDB and SQS (where a held message comes back in whole
// seconds: docs/guarantees.md, "Limits").
func TestRateLimitAWS(t *testing.T) { testRateLimit(t, true) }

func testRateLimit(t *testing.T, onAWS bool) {
	c := limitedOn(t, `"concurrency": 4, "rate": "5/s"`, newConcurrent().handler("dev", 0), onAWS)
	ids := scheduleKeyed(t, c, 30)
	succeedOnce(t, c, ids)
	var starts []time.Time
	for _, id := range ids {
		h, err := c.Attempts(t.Context(), "work", id)
		if err != nil || len(h.Attempts) != 1 {
			t.Fatalf("task %s: history %+v (%v), want its one attempt", id, h, err)
		}
		starts = append(starts, h.Attempts[0].StartedAt)
	}
	slices.SortFunc(starts, time.Time.Compare)
	if span, want := starts[len(starts)-1].Sub(starts[0]), 29*200*time.Millisecond; span < want {
		t.Fatalf("the starts of 30 tasks spread over %s, want %s at least", span, want)
	}
}

// TestMaxRunningAcrossExecutors: max_running 2 holds across two atf dev stacks, each with
// executors of concurrency 4, on one store and one queue, as two executors of a lambda on AWS
// share DynamoDB and SQS; both run tasks.
func TestMaxRunningAcrossExecutors(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "work", "concurrency": 4, "max_running": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	q := memqueue.New()
	r := newConcurrent()
	var c *client.Client
	for _, who := range []string{"one", "two"} {
		mux := worker.NewMux()
		mux.Handle("work", r.handler(who, 50*time.Millisecond))
		s, err := local.Start(context.Background(), local.Config{
			Addr: "127.0.0.1:0", Store: store, Queue: q, Mux: mux, Registry: reg,
			Task: task.Config{PollInterval: 50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
		c = &client.Client{Endpoint: "http://" + s.Addr()}
	}
	ids := scheduleKeyed(t, c, 20)
	succeedOnce(t, c, ids)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.most > 2 {
		t.Errorf("%d tasks ran at once, want 2 at most", r.most)
	}
	if r.by["one"] == 0 || r.by["two"] == 0 {
		t.Errorf("tasks run by each stack: %v, want both to run some", r.by)
	}
	t.Logf("at most %d tasks ran at once; run by each stack: %v", r.most, r.by)
}
