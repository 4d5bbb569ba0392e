package local_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestWaitForResult: on atf dev's embedded store a client waits for a task's result in one
// request, woken by the write that ends the task; no waiter is left.
func TestWaitForResult(t *testing.T) {
	release := make(chan struct{})
	mux := worker.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		<-release
		return json.RawMessage(`{"done":true}`), nil
	})
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	ctx := context.Background()
	tk, _, err := c.Schedule(ctx, "work", client.ScheduleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for s.Waiters() == 0 {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	got, err := c.Wait(ctx, "work", tk.ID)
	if err != nil || got.Status != task.StatusSuccess || string(got.Result) != `{"done":true}` {
		t.Fatalf("Wait: %s %s, %v; want success with the result", got.Status, got.Result, err)
	}
	if n := s.Waiters(); n != 0 {
		t.Errorf("%d waiters left after the answer", n)
	}
}

// TestListenerAllowsTheLongestWait: atf dev's listener neither cuts a request that waits the
// longest nor its answer (the read deadline ends a request still being served).
func TestListenerAllowsTheLongestWait(t *testing.T) {
	l := local.DefaultHTTPLimits
	if l.ReadTimeout <= frontend.MaxWait || l.WriteTimeout <= frontend.MaxWait {
		t.Errorf("read timeout %s, write timeout %s: a wait of %s would be cut", l.ReadTimeout, l.WriteTimeout, frontend.MaxWait)
	}
}
