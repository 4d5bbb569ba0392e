package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestFlowsOnLocalStack runs the client's flow calls against the real API on the embedded store:
// a diamond scheduled with ScheduleGraph, where the join reads b's and c's results with
// DecodeUpstream; its replay; Downstreams in pages; AddUpstreams, and the 422s of a cycle and of
// a missing upstream.
func TestFlowsOnLocalStack(t *testing.T) {
	mux := worker.NewMux()
	mux.Handle("echo", worker.HandlerFunc(func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		return tk.Payload, nil
	}))
	mux.Handle("join", worker.HandlerFunc(func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		var b, c struct{ Text string }
		if err := tk.DecodeUpstream("b", &b); err != nil {
			return nil, worker.Fatal(err)
		}
		if err := tk.DecodeUpstream("echo/c", &c); err != nil {
			return nil, worker.Fatal(err)
		}
		return json.Marshal([]string{b.Text, c.Text})
	}))
	s, err := local.Start(t.Context(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux,
		Task:   task.Config{PollInterval: 20 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	ctx := t.Context()

	g := &client.Graph{Lambda: "echo"}
	a := g.Add(client.ScheduleRequest{ID: "a", Payload: json.RawMessage(`{"text":"a"}`)})
	d := g.Chord([]task.Ref{a},
		[]client.ScheduleRequest{{ID: "b", Payload: json.RawMessage(`{"text":"b"}`)}, {ID: "c", Payload: json.RawMessage(`{"text":"c"}`)}},
		client.ScheduleRequest{ID: "d", Lambda: "join"})
	first, created, err := c.ScheduleGraph(ctx, g)
	if err != nil || !created || len(first) != 4 || first[3].Lambda != "join" || first[3].Status != task.StatusPending {
		t.Fatalf("ScheduleGraph: %v, created %v, %+v", err, created, first)
	}
	again, created, err := c.ScheduleGraph(ctx, g)
	if err != nil || created || len(again) != 4 {
		t.Fatalf("the same graph again: %v, created %v, %d tasks", err, created, len(again))
	}
	if done := waitTerminal(t, c, d); done.Status != task.StatusSuccess || string(done.Result) != `["b","c"]` {
		t.Fatalf("d: %s with %s (%s)", done.Status, done.Result, done.Error)
	}

	var downs []string
	cursor := ""
	for range 3 {
		page, next, err := c.Downstreams(ctx, "echo", "a", cursor, 1)
		if err != nil || len(page) > 1 {
			t.Fatalf("Downstreams: %v, %v", page, err)
		}
		for _, p := range page {
			downs = append(downs, p.Ref().String()+" "+string(p.Status))
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	slices.Sort(downs)
	if !slices.Equal(downs, []string{"echo/b success", "echo/c success"}) || cursor != "" {
		t.Errorf("downstreams of a: %v, cursor %q", downs, cursor)
	}

	// x waits for y, which waits for x: refused, naming the cycle.
	later := &client.Graph{Lambda: "echo"}
	x := later.Add(client.ScheduleRequest{ID: "x", Delay: "1h"})
	y := later.Add(client.ScheduleRequest{ID: "y", Delay: "1h"}, x)
	if _, _, err := c.ScheduleGraph(ctx, later); err != nil {
		t.Fatal(err)
	}
	tk, err := c.AddUpstreams(ctx, "echo", "x", []task.Ref{d})
	if err != nil || tk.Status != task.StatusPending || !slices.Equal(tk.After, []task.Ref{d}) {
		t.Fatalf("AddUpstreams: %+v, %v", tk, err)
	}
	var apiErr *client.Error
	if _, err := c.AddUpstreams(ctx, "echo", "x", []task.Ref{y}); !errors.As(err, &apiErr) || apiErr.Status != 422 ||
		!strings.Contains(apiErr.Message, "echo/x → echo/y → echo/x") {
		t.Errorf("a cycle: %v", err)
	}
	missing := &client.Graph{Lambda: "echo"}
	missing.Add(client.ScheduleRequest{}, task.Ref{Lambda: "echo", ID: "nope"})
	if _, _, err := c.ScheduleGraph(ctx, missing); !errors.As(err, &apiErr) || apiErr.Status != 422 || !strings.Contains(apiErr.Message, "echo/nope") {
		t.Errorf("a missing upstream: %v", err)
	}
}

func waitTerminal(t *testing.T, c *client.Client, r task.Ref) task.Task {
	t.Helper()
	for range 500 {
		tk, err := c.Get(t.Context(), r.Lambda, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status.Terminal() {
			return tk
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not end", r)
	return task.Task{}
}
