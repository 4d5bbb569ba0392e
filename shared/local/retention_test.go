package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestRetention: atf dev prunes the finished tasks of its file older than its retention, at
// start, and a negative retention keeps them.
func TestRetention(t *testing.T) {
	for _, c := range []struct {
		name      string
		retention time.Duration
		pruned    bool
	}{{"an hour", time.Hour, true}, {"forever", -1, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			db := filepath.Join(t.TempDir(), "atf.db")
			s, err := sqlitestore.Open(db)
			if err != nil {
				t.Fatal(err)
			}
			ended := time.Now().Add(-2 * time.Hour).UTC()
			old := task.Task{Lambda: "work", ID: "old", Priority: "default", Status: task.StatusSuccess, MaxAttempts: 1,
				RunAt: ended, CreatedAt: ended, UpdatedAt: ended, Version: 3, Spec: "x"}
			if err := s.Create(ctx, old); err != nil {
				t.Fatal(err)
			}
			s.Close()

			mux := worker.NewMux()
			mux.HandleFunc("work", func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
			stack, err := local.Start(ctx, local.Config{Addr: "127.0.0.1:0", DBPath: db, Mux: mux, Retention: c.retention, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer stack.Stop(context.Background())
			cl := &client.Client{Endpoint: "http://" + stack.Addr()}
			fresh, _, err := cl.Schedule(ctx, "work", client.ScheduleRequest{})
			if err != nil {
				t.Fatal(err)
			}
			// The first pass runs at start, and with no retention there is no pass.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := cl.Get(ctx, "work", "old")
				var e *client.Error
				gone := errors.As(err, &e) && e.Status == http.StatusNotFound
				if err != nil && !gone {
					t.Fatal(err)
				}
				if gone != c.pruned && c.pruned && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if gone != c.pruned {
					t.Fatalf("the old finished task: gone %t, want %t", gone, c.pruned)
				}
				break
			}
			if _, err := cl.Get(ctx, "work", fresh.ID); err != nil {
				t.Errorf("the task scheduled now: %v", err)
			}
		})
	}
}
