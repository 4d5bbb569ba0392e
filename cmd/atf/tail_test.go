package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestTail: atf tail follows a lambda's transitions live from atf dev, as JSON lines with
// --json: a task that fails once and then succeeds shows scheduled, started, retried, started,
// succeeded, in order; the events of another lambda are not shown; an interrupt ends it cleanly.
// Without --json, one line an event.
func TestTail(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	schedule(t, dev.client, "retry", client.ScheduleRequest{ID: "other-lambda", MaxAttempts: 1})
	cmd := exec.Command(atfBin, "tail", "flaky", "--json", "--endpoint", dev.client.Endpoint)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	schedule(t, dev.client, "flaky", client.ScheduleRequest{ID: "tailed", MaxAttempts: 5})

	events := make(chan lifecycle.Event)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e lifecycle.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("not an event: %s", sc.Text())
			}
			events <- e
		}
		close(events)
	}()
	// flaky.sh fails its first two attempts.
	want := []lifecycle.Type{lifecycle.Scheduled, lifecycle.Started, lifecycle.Retried, lifecycle.Started, lifecycle.Retried, lifecycle.Started, lifecycle.Succeeded}
	for i, typ := range want {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("tail ended after %d events: %s", i, stderr.String())
			}
			if e.Lambda != "flaky" || e.TaskID != "tailed" || e.Type != typ {
				t.Fatalf("event %d: %s of %s/%s, want %s of flaky/tailed", i, e.Type, e.Lambda, e.TaskID, typ)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no event %d (%s) in a minute", i, typ)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	for range events { // drain until it exits
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail did not end cleanly on an interrupt: %v\n%s", err, stderr.String())
	}

	// Plain lines, from what atf dev keeps: the task's five transitions, ending in success.
	plain := exec.Command(atfBin, "tail", "flaky", "--endpoint", dev.client.Endpoint)
	out := &lockedBuffer{}
	plain.Stdout = out
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "\n") < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	plain.Process.Signal(syscall.SIGINT)
	plain.Wait()
	if !regexp.MustCompile(`tailed\s+succeeded\s+processing -> success\s+attempt 3/5`).MatchString(out.String()) {
		t.Fatalf("plain tail:\n%s", out.String())
	}
}

// TestTailWithoutFeed: where the API keeps no feed, as on AWS, atf tail says to subscribe to
// EventBridge.
func TestTailWithoutFeed(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(httpapi.New(svc, nil))
	t.Cleanup(srv.Close)
	err = run([]string{"tail", "echo", "--endpoint", srv.URL}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "EventBridge") {
		t.Fatalf("err = %v, want one naming EventBridge", err)
	}
}
