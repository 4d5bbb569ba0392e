package main

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// TestCLIFlow runs task flows with the CLI on atf dev: a diamond a → {b, c} → d, where d (the
// echo script, cat) gets the envelope with b's and c's results; atf graph around it; atf after,
// which refuses a cycle; an upstream that does not exist; and the trigger rules after a fatal
// failure.
func TestCLIFlow(t *testing.T) { testCLIFlow(t, embedded) }

// TestCLIFlowAWS does the same on DynamoDB and SQS.
func TestCLIFlowAWS(t *testing.T) { testCLIFlow(t, onAWS) }

func testCLIFlow(t *testing.T, b backend) {
	dev := startDev(t, handlersDir(t), b(t))
	c := dev.client
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(atfBin, append(args, "--endpoint", c.Endpoint)...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("atf %v: %v\n%s", args, err, out)
		}
		return out
	}

	must("schedule", "echo", "--id", "a", "--payload", `{"text":"a"}`)
	must("schedule", "echo", "--id", "b", "--after", "a", "--payload", `{"text":"b"}`)
	must("schedule", "echo", "--id", "c", "--after", "echo/a", "--payload", `{"text":"c"}`)
	out := must("schedule", "echo", "--id", "d", "--after", "b", "--after", "c", "--json")
	var d task.Task
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.After) != 2 || d.After[1] != (task.Ref{Lambda: "echo", ID: "c"}) || d.Trigger != "" && d.Trigger != task.TriggerAllSuccess {
		t.Fatalf("schedule d: %v\n%s", err, out)
	}
	// b and c, cat too, answered their own envelopes, with a's result.
	envelope := func(payload string, ups ...string) string {
		return `{"payload":` + payload + `,"upstreams":[` + strings.Join(ups, ",") + `]}`
	}
	upstream := func(id, result string) string {
		return `{"lambda":"echo","id":"` + id + `","status":"success","result":` + result + `}`
	}
	a := upstream("a", `{"text":"a"}`)
	want := envelope("null", upstream("b", envelope(`{"text":"b"}`, a)), upstream("c", envelope(`{"text":"c"}`, a)))
	if done := waitTerminal(t, c, "echo", "d"); done.Status != task.StatusSuccess || compact(done.Result) != want {
		t.Fatalf("d: %s with %s (%s), want %s", done.Status, done.Result, done.Error, want)
	}
	out = must("graph", "echo", "a")
	for _, want := range []string{"echo/a  success\n", "\n  echo/b  success\n    echo/d  success\n", "\n  echo/c  success\n    echo/d  success  (see above)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("atf graph echo a: no %q in\n%s", want, out)
		}
	}
	out = must("graph", "echo", "d")
	for _, want := range []string{"echo/d  success  trigger rule all_success\n", "\n  echo/b  success\n    echo/a  success\n", "\n    echo/a  success  (see above)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("atf graph echo d: no %q in\n%s", want, out)
		}
	}

	// atf after: a task that has not started waits for one more; a cycle is refused, naming it.
	must("schedule", "echo", "--id", "x", "--delay", "1h")
	must("schedule", "echo", "--id", "y", "--delay", "1h", "--after", "x")
	if out := must("after", "echo", "x", "d"); !regexp.MustCompile(`status:\s+pending`).MatchString(out) || !strings.Contains(out, "echo/d") {
		t.Errorf("atf after echo x d:\n%s", out)
	}
	if out := must("graph", "echo", "d"); !strings.Contains(out, "\n  echo/x  ") || !strings.Contains(out, "\n    echo/y  pending") {
		t.Errorf("atf graph echo d, after x waits for it:\n%s", out)
	}
	if out, err := cli("after", "echo", "x", "y"); err == nil || !strings.Contains(out, "cycle") || !strings.Contains(out, "echo/x") || !strings.Contains(out, "echo/y") {
		t.Errorf("a cycle: want a non-zero exit naming it, got %v\n%s", err, out)
	}
	if out, err := cli("schedule", "echo", "--after", "nope"); err == nil || !strings.Contains(out, "echo/nope") {
		t.Errorf("a missing upstream: want a non-zero exit naming it, got %v\n%s", err, out)
	}

	// After a fatal failure, all_done runs and all_success ends upstream_failed, naming it.
	must("schedule", "fail", "--id", "f")
	must("schedule", "echo", "--id", "g", "--after", "fail/f", "--trigger-rule", "all_done")
	must("schedule", "echo", "--id", "h", "--after", "fail/f")
	if done := waitTerminal(t, c, "echo", "g"); done.Status != task.StatusSuccess || !strings.Contains(string(done.Result), `"status":"fatal_failure"`) {
		t.Errorf("all_done: %s with %s", done.Status, done.Result)
	}
	if done := waitTerminal(t, c, "echo", "h"); done.Status != task.StatusUpstreamFailed || !strings.Contains(done.Error, "fail/f") {
		t.Errorf("all_success: %s (%s)", done.Status, done.Error)
	}
	if out := must("get", "echo", "h"); !regexp.MustCompile(`after:\s+fail/f\n`).MatchString(out) || !regexp.MustCompile(`status:\s+upstream_failed`).MatchString(out) {
		t.Errorf("atf get echo h:\n%s", out)
	}
}
