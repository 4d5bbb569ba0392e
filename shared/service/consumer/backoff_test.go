package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TestTimeoutTakesLambdaBackoff: a task whose worker went silent retries after its lambda's
// backoff, not the config's.
func TestTimeoutTakesLambdaBackoff(t *testing.T) {
	e := newEnvWith(t, options{backoff: &task.BackoffPolicy{Base: time.Hour, Factor: 2, Max: 2 * time.Hour}}, "l")
	ctx := context.Background()
	e.schedule(t, "l", task.Spec{ID: "silent", MaxAttempts: 3})
	e.sweep(t)
	if _, err := task.Apply(ctx, e.store, "l", "silent", func(tk task.Task) (task.Task, error) {
		return task.Claim(tk, "lease", e.now, e.cfg)
	}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(e.cfg.HeartbeatTimeout)
	if st := e.sweep(t); st.TimedOut != 1 {
		t.Fatalf("stats %+v, want 1 timed out", st)
	}
	got, err := e.store.Get(ctx, "l", "silent")
	if err != nil || got.Status != task.StatusRetriableFailure || !got.NextTriggerAt.Equal(e.now.Add(time.Hour)) {
		t.Fatalf("timed out: %s, due %v, %v; want retriable_failure due after the lambda's base, 1h", got.Status, got.NextTriggerAt, err)
	}
}
