package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/taskend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// waitServer serves the API on the embedded store with waits of at most maxWait, and counts
// the requests that wait.
func waitServer(t *testing.T, maxWait time.Duration) (*Client, task.Store, *atomic.Int64) {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ends := taskend.Wrap(db)
	svc := frontend.New(ends, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}, Changes: ends, MaxWait: maxWait})
	api := httpapi.New(svc, nil)
	var waits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("wait") {
			waits.Add(1)
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Client{Endpoint: srv.URL, MaxWait: time.Hour}, ends, &waits
}

// TestWaitLoops: Wait asks again while the server's waits end before the task, and returns
// the task once it ended.
func TestWaitLoops(t *testing.T) {
	c, store, waits := waitServer(t, 10*time.Millisecond)
	ctx := context.Background()
	if _, _, err := c.Schedule(ctx, "echo", ScheduleRequest{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		t   task.Task
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		tk, err := c.Wait(ctx, "echo", "a")
		answered <- answer{tk, err}
	}()
	for waits.Load() < 3 { // past the server's bound twice
		time.Sleep(time.Millisecond)
	}
	if _, err := task.Apply(ctx, store, "echo", "a", func(tk task.Task) (task.Task, error) {
		return task.Cancel(tk, time.Now().UTC())
	}); err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || a.t.Status != task.StatusCancelled {
		t.Fatalf("Wait: %s, %v; want the cancelled task", a.t.Status, a.err)
	}
	// GetWait is one request: the task as it stands once the server's wait is over.
	if _, _, err := c.Schedule(ctx, "echo", ScheduleRequest{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	before := waits.Load()
	if tk, err := c.GetWait(ctx, "echo", "b", time.Hour); err != nil || tk.Status != task.StatusNew || waits.Load() != before+1 {
		t.Errorf("GetWait: %s, %v in %d requests; want the new task in one", tk.Status, err, waits.Load()-before)
	}
}

// TestWaitContextEnds: Wait stops when its context ends, with the context's error.
func TestWaitContextEnds(t *testing.T) {
	c, _, waits := waitServer(t, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	if _, _, err := c.Schedule(ctx, "echo", ScheduleRequest{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for waits.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := c.Wait(ctx, "echo", "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after its context ended: %v, want context.Canceled", err)
	}
	if _, err := c.Wait(context.Background(), "echo", "missing"); err == nil {
		t.Fatal("Wait for a missing task: no error")
	}
}
