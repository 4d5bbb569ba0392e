package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/worker"
)

// uiDir holds the Playwright suite and its node_modules (make ui-tools installs them).
const uiDir = "../../../tests/ui"

const uiToken = "dashboard-test-token"

// TestDashboardUI runs the Playwright suite of tests/ui in headless Chromium against an atf dev
// with a token and tasks in every status; each of its tests is a subtest here, so that make test
// counts them. Screenshots go to bin/dashboard-*.png. Without node, Playwright or Chromium it
// skips, saying what is missing, unless ATF_UI_TESTS=require (make test), when it fails.
func TestDashboardUI(t *testing.T) {
	node, chromium := uiTools(t)
	c := seed(t)

	screenshots, err := filepath.Abs("../../../bin")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test-reporter=./jsonl-reporter.mjs", "--test-reporter-destination=stdout", "dashboard.test.mjs")
	cmd.Dir = uiDir
	cmd.Env = append(os.Environ(), "ATF_URL="+c.Endpoint, "ATF_TOKEN="+uiToken, "ATF_CHROMIUM="+chromium, "ATF_SCREENSHOTS="+screenshots)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ran := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Name  string `json:"name"`
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Name == "" {
			t.Log(sc.Text())
			continue
		}
		ran++
		t.Run(r.Name, func(t *testing.T) {
			if !r.OK {
				t.Error(r.Error)
			}
		})
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the Playwright suite: %v\n%s", err, stderr.String())
	}
	if ran == 0 {
		t.Fatalf("the Playwright suite ran no test\n%s", stderr.String())
	}
}

// uiTools finds node, Playwright and Chromium, or skips (fails under ATF_UI_TESTS=require).
func uiTools(t *testing.T) (node, chromium string) {
	missing := func(what string) {
		msg := what + ": run make ui-tools (it installs Debian's chromium and Playwright from npm)"
		if os.Getenv("ATF_UI_TESTS") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node")
	}
	if _, err := os.Stat(filepath.Join(uiDir, "node_modules", "playwright", "package.json")); err != nil {
		missing("no Playwright in tests/ui/node_modules")
	}
	chromium = os.Getenv("ATF_CHROMIUM")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			missing("no chromium on the PATH (or ATF_CHROMIUM)")
		}
	}
	return node, chromium
}

// seed starts atf dev with a token and four lambdas, and leaves tasks in every status:
//   - echo: success (ok-1..3), new (later: due in an hour; held-1, held by a paused gate on the
//     collection hold), pending (waits-later), cancelled (cancelled-1), dropped (spam-1, by a
//     drop gate on the collection spam), upstream_failed (orphan, after the fatal task);
//   - once: fails the first run of each task id, succeeds after: dead (dead-1, one attempt;
//     redriven by the suite, it succeeds) and retriable_failure (retry-1, its retry an hour away);
//   - fatal: fatal_failure (fatal-1), its attempt with a log;
//   - block: runs until cancelled, one at a time: processing (run-1, key acme), enqueued (run-2,
//     key acme; run-3, key bolt; run-4, no key); its limits key_concurrency 1 and rate 100/s,
//     which its one slot keeps from holding any start;
//
// and an active schedule of echo, daily (every 24h, so it does not fire while the suite runs).
func seed(t *testing.T) *client.Client {
	t.Helper()
	var seen sync.Map
	mux := worker.NewMux()
	mux.HandleFunc("echo", func(_ context.Context, w worker.Task) (json.RawMessage, error) { return w.Payload, nil })
	mux.HandleFunc("once", func(_ context.Context, w worker.Task) (json.RawMessage, error) {
		if _, again := seen.LoadOrStore(w.ID, true); !again {
			return nil, errors.New("the first run of a task fails")
		}
		return json.RawMessage(`{"ok":true}`), nil
	})
	mux.HandleFunc("fatal", func(ctx context.Context, w worker.Task) (json.RawMessage, error) {
		fmt.Fprintf(worker.LogOf(ctx), "checking the input of %s\nthe input is marked bad\n", w.ID)
		return nil, fmt.Errorf("bad input, no retry: %w", worker.ErrFatal)
	})
	mux.HandleFunc("block", func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	timing := chaostest.Timing(false)
	timing.BackoffBase, timing.BackoffMax = time.Hour, time.Hour // a retry waits in retriable_failure
	// A lease that outlives a loaded machine's pauses: the blocked task must still be running
	// when the page looks (chaos timings would lose it to a late heartbeat under load).
	timing.HeartbeatInterval, timing.HeartbeatTimeout, timing.LeaseMargin = 500*time.Millisecond, 20*time.Second, 2*time.Second
	timing.MaxAttempts = 3
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "echo", "concurrency": 1}, {"name": "once", "concurrency": 1},
		{"name": "fatal", "concurrency": 1}, {"name": "block", "concurrency": 1, "key_concurrency": 1, "rate": "100/s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := chaostest.Start(t, local.Config{Mux: mux, Registry: reg, Task: timing, Token: uiToken, DBPath: filepath.Join(t.TempDir(), "atf.db")})
	c.Token = uiToken
	ctx := t.Context()
	schedule := func(lambda string, r client.ScheduleRequest) {
		t.Helper()
		if _, _, err := c.Schedule(ctx, lambda, r); err != nil {
			t.Fatalf("schedule %s/%s: %v", lambda, r.ID, err)
		}
	}
	if _, err := c.SetGate(ctx, "echo", "spam", "drop"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetGate(ctx, "echo", "hold", "pause"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateSchedule(ctx, "echo", task.ScheduleSpec{ID: "daily", Rate: "24h"}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		schedule("echo", client.ScheduleRequest{ID: fmt.Sprintf("ok-%d", i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Priority: "high"})
	}
	schedule("echo", client.ScheduleRequest{ID: "later", Delay: "1h", Priority: "low"})
	schedule("echo", client.ScheduleRequest{ID: "waits-later", After: []task.Ref{{ID: "later"}}})
	schedule("echo", client.ScheduleRequest{ID: "cancelled-1", Delay: "1h"})
	if _, err := c.Cancel(ctx, "echo", "cancelled-1"); err != nil {
		t.Fatal(err)
	}
	schedule("echo", client.ScheduleRequest{ID: "spam-1", Collection: "spam"})
	schedule("echo", client.ScheduleRequest{ID: "held-1", Collection: "hold"})
	schedule("once", client.ScheduleRequest{ID: "dead-1", MaxAttempts: 1})
	schedule("once", client.ScheduleRequest{ID: "retry-1"})
	schedule("fatal", client.ScheduleRequest{ID: "fatal-1", Payload: json.RawMessage(`{"bad":true}`)})
	schedule("echo", client.ScheduleRequest{ID: "orphan", After: []task.Ref{{Lambda: "fatal", ID: "fatal-1"}}})
	schedule("block", client.ScheduleRequest{ID: "run-1", Key: "acme"})
	waitFor(t, c, "block", "run-1", task.StatusProcessing)
	schedule("block", client.ScheduleRequest{ID: "run-2", Key: "acme"})
	schedule("block", client.ScheduleRequest{ID: "run-3", Key: "bolt"})
	schedule("block", client.ScheduleRequest{ID: "run-4"})
	for _, w := range []struct {
		lambda, id string
		status     task.Status
	}{
		{"echo", "ok-3", task.StatusSuccess}, {"echo", "spam-1", task.StatusDropped}, {"once", "dead-1", task.StatusDead},
		{"once", "retry-1", task.StatusRetriableFailure}, {"fatal", "fatal-1", task.StatusFatalFailure},
		{"echo", "orphan", task.StatusUpstreamFailed}, {"block", "run-2", task.StatusEnqueued},
		{"block", "run-3", task.StatusEnqueued}, {"block", "run-4", task.StatusEnqueued},
		{"echo", "later", task.StatusNew}, {"echo", "waits-later", task.StatusPending},
	} {
		waitFor(t, c, w.lambda, w.id, w.status)
	}
	checkStaticNeedsNoToken(t, c.Endpoint)
	return c
}

// waitFor waits until the task has the status.
func waitFor(t *testing.T, c *client.Client, lambda, id string, want task.Status) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.Get(t.Context(), lambda, id)
		if err == nil && got.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: %s (%v), want %s", lambda, id, got.Status, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkStaticNeedsNoToken: the page loads without the token and holds no data; the API and the
// dashboard's own endpoints still need it.
func checkStaticNeedsNoToken(t *testing.T, endpoint string) {
	t.Helper()
	for path, want := range map[string]int{"/": 200, "/app.js": 200, "/v1/lambdas": 401, local.ActivityPath: 401, local.CostsPath: 401,
		local.LimitsPath: 401, local.KeysPath + "?lambda=block": 401} {
		resp, err := http.Get(endpoint + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without the token: %d, want %d", path, resp.StatusCode, want)
		}
		if want == 200 && (strings.Contains(string(body), "ok-1") || resp.Header.Get("Content-Security-Policy") == "") {
			t.Errorf("GET %s: a task id in the static file, or no Content-Security-Policy", path)
		}
	}
}
