package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// The activity of a minute counts its claims and ends, takes first attempts' latencies only,
// bounds percentiles by their bucket, and forgets a minute once it is an hour old.
func TestActivity(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	a := NewActivity([]string{"echo", "sleep"}, func() time.Time { return now })
	for _, ms := range []int{5, 20, 20, 70, 3000} {
		a.Claimed(task.Task{Lambda: "echo", Attempts: 1, RunAt: now.Add(-time.Duration(ms) * time.Millisecond)})
	}
	a.Claimed(task.Task{Lambda: "echo", Attempts: 2, RunAt: now.Add(-time.Hour)}) // a retry: no sample
	a.Claimed(task.Task{Lambda: "unknown", Attempts: 1})                          // not counted
	a.Ended(task.Task{Lambda: "echo", Status: task.StatusSuccess})
	a.Ended(task.Task{Lambda: "sleep", Status: task.StatusDead})
	a.Ended(task.Task{Lambda: "echo", Status: task.StatusProcessing}) // no end

	all, _ := a.Snapshot("")
	if len(all.Minutes) != Minutes {
		t.Fatalf("%d minutes, want %d", len(all.Minutes), Minutes)
	}
	m := all.Minutes[Minutes-1]
	if m.Delivered != 6 || m.FirstAttempts != 5 || *m.P50MS != 25 || *m.P95MS != 3000 || *m.MaxMS != 3000 {
		t.Errorf("this minute: delivered %d, first %d, p50 %d, p95 %d; want 6, 5, 25 (its bucket's bound), 3000 (the max, under its bucket's 5000)",
			m.Delivered, m.FirstAttempts, *m.P50MS, *m.P95MS)
	}
	if m.Ended[task.StatusSuccess] != 1 || m.Ended[task.StatusDead] != 1 || !m.Start.Equal(now.Truncate(time.Minute)) {
		t.Errorf("this minute: %+v", m)
	}
	if sleep, _ := a.Snapshot("sleep"); sleep.Minutes[Minutes-1].Delivered != 0 || sleep.Minutes[Minutes-1].P50MS != nil {
		t.Errorf("sleep: %+v, want no deliveries and no percentiles", sleep.Minutes[Minutes-1])
	}
	if _, ok := a.Snapshot("nope"); ok {
		t.Error("a lambda it does not know has a snapshot")
	}

	now = now.Add(59 * time.Minute)
	if m, _ := a.Snapshot(""); m.Minutes[0].Delivered != 6 {
		t.Errorf("59 minutes later the first minute holds %d deliveries, want 6", m.Minutes[0].Delivered)
	}
	now = now.Add(time.Minute)
	a.Claimed(task.Task{Lambda: "echo", Attempts: 1, RunAt: now})
	m2, _ := a.Snapshot("")
	total := 0
	for _, m := range m2.Minutes {
		total += m.Delivered
	}
	if total != 1 || m2.Minutes[Minutes-1].Delivered != 1 {
		t.Errorf("an hour later: %d deliveries in the hour, want only the new one", total)
	}

	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/dashboard/activity?lambda=nope", nil))
	var e struct{ Error struct{ Code string } }
	if rec.Code != http.StatusNotFound || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code != "not_found" {
		t.Errorf("an unknown lambda: %d %s", rec.Code, rec.Body)
	}
}

// A failed run whose retry is sent ahead ends enqueued, in its queue for the retry: the charts
// count it retried, as /metrics does, and a run that ends for good counts once, as its status.
func TestActivityCountsRetriesSentAhead(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	a := NewActivity([]string{"echo"}, func() time.Time { return now })
	cfg := task.Config{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Second, EnqueueTimeout: time.Minute, HeartbeatTimeout: time.Minute}
	run := func(id string, attempts int) task.Task {
		t.Helper()
		claimed, err := task.Claim(task.Task{Lambda: "echo", ID: id, Status: task.StatusEnqueued, Attempts: attempts, MaxAttempts: 3}, "lease", now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		failed, err := task.Fail(claimed, "lease", "boom", true, now, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		return failed
	}
	// As the status controller writes it (status.Controller.ahead): the failure and the send
	// ahead in one write.
	ahead, _, err := task.RetryAhead(run("r1", 0), now, cfg)
	if err != nil || ahead.Status != task.StatusEnqueued {
		t.Fatalf("the retry sent ahead: %s, %v; want enqueued", ahead.Status, err)
	}
	a.Ended(ahead)
	a.Ended(run("r2", 0)) // a retry left waiting in the store
	a.Ended(run("d1", 2)) // its last attempt: dead

	a.Ended(task.Task{Lambda: "echo", Status: task.StatusEnqueued, From: task.StatusNew}) // an enqueue, no run's end
	m, _ := a.Snapshot("echo")
	ended := m.Minutes[Minutes-1].Ended
	if ended[task.StatusRetriableFailure] != 2 || ended[task.StatusDead] != 1 || ended[task.StatusEnqueued] != 0 {
		t.Errorf("ended %v; want 2 retriable_failure (one sent ahead, one waiting) and 1 dead", ended)
	}
}

// The static files are served with a policy that allows this origin's scripts only.
func TestStatic(t *testing.T) {
	for path, want := range map[string]int{"/": 200, "/app.js": 200, "/vendor/htm-preact-3.1.1.module.js": 200, "/nope": 404} {
		rec := httptest.NewRecorder()
		Static().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want || rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d, CSP %q; want %d and a policy", path, rec.Code, rec.Header().Get("Content-Security-Policy"), want)
		}
	}
	rec := httptest.NewRecorder()
	Static().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", rec.Code)
	}
}
