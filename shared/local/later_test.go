package local_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/task"
)

// TestProgramSnoozesThenRetriesAfter: on atf dev, a program that snoozes its first run and asks
// to retry its second after a delay runs a third time no earlier than each delay, and succeeds:
// the snooze counted no attempt (the second run is attempt 1 again), the retry counted one, and
// the history lists the three runs as snoozed, retriable and success.
func TestProgramSnoozesThenRetriesAfter(t *testing.T) {
	marks := t.TempDir()
	dir := scripts(t, map[string]string{"nap.sh": `m="` + marks + `/$ATF_TASK_ID"
if [ ! -e "$m.1" ]; then touch "$m.1"; echo '{"snooze": "300ms"}'; exit 75; fi
if [ ! -e "$m.2" ]; then touch "$m.2"; echo "busy at attempt $ATF_ATTEMPT" >&2; echo '{"retry_after": "400ms"}'; exit 75; fi
echo "{\"attempt\": $ATF_ATTEMPT}"`})
	// A backoff of an hour: only the handler's delay can run the retry within the test.
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "nap", "kind": "ecs", "program": "nap.sh", "backoff": {"base": "1h"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg.Dir = dir
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Registry: reg,
		Task: task.Config{PollInterval: 50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tk, _, err := c.Schedule(ctx, "nap", client.ScheduleRequest{ID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "nap", tk.ID)
	if err != nil || got.Status != task.StatusSuccess || string(got.Result) != `{"attempt":2}` || got.Attempts != 2 {
		t.Fatalf("task %s, result %s, %d attempts, %v; want success at attempt 2", got.Status, got.Result, got.Attempts, err)
	}
	h, err := c.Attempts(ctx, "nap", tk.ID)
	if err != nil || len(h.Attempts) != 3 {
		t.Fatalf("history %+v, %v; want 3 runs", h, err)
	}
	want := []struct {
		outcome task.Outcome
		err     string
		after   time.Duration // the delay the run before asked for
	}{
		{task.OutcomeSnoozed, "snoozed for 300ms by its handler", 0},
		{task.OutcomeRetriable, "busy at attempt 1", 300 * time.Millisecond},
		{task.OutcomeSuccess, "", 400 * time.Millisecond},
	}
	for i, w := range want {
		a := h.Attempts[i]
		if a.Number != i+1 || a.Outcome != w.outcome || a.Error != w.err {
			t.Errorf("run %d: number %d, %s, error %q; want %d, %s, %q", i+1, a.Number, a.Outcome, a.Error, i+1, w.outcome, w.err)
		}
		if i > 0 && a.StartedAt.Before(h.Attempts[i-1].EndedAt.Add(w.after)) {
			t.Errorf("run %d started %s after the run before ended; want at least %s", i+1, a.StartedAt.Sub(h.Attempts[i-1].EndedAt), w.after)
		}
	}
}
