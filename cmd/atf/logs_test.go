package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TestPrintLog: atf logs prints a kept log as it was written; for an attempt whose log is in
// CloudWatch Logs (on AWS), where it is, with a Logs Insights query over the attempt's stream
// and time range and the AWS CLI command that runs it; and otherwise says there is none.
func TestPrintLog(t *testing.T) {
	start := time.Date(2026, 11, 28, 1, 2, 3, 0, time.UTC)
	a := task.Attempt{Number: 2, StartedAt: start, EndedAt: start.Add(3 * time.Second), Outcome: task.OutcomeRetriable}
	print := func(a task.Attempt) string {
		var out bytes.Buffer
		printLog(&out, attemptLog{Attempt: a, id: "w1"})
		return out.String()
	}

	logged := a
	logged.Log = "fetching\nconnection reset"
	if got := print(logged); got != "fetching\nconnection reset\n" {
		t.Errorf("a kept log: %q", got)
	}

	onAWS := a
	onAWS.LogLocation = &task.LogLocation{Group: "/aws/lambda/atf-worker-echo", Stream: "2026/11/28/[$LATEST]0abc", RequestID: "req-1"}
	got := print(onAWS)
	for _, want := range []string{
		"attempt 2 (retriable) of task w1 logged to CloudWatch Logs",
		"log group:   /aws/lambda/atf-worker-echo", "log stream:  2026/11/28/[$LATEST]0abc", "request id:  req-1",
		"time range:  2026-11-28T01:01:03Z to 2026-11-28T01:03:06Z",
		`| filter @logStream = "2026/11/28/[$LATEST]0abc"`,
		"aws logs start-query --log-group-name '/aws/lambda/atf-worker-echo' --start-time 1795827663 --end-time 1795827786 --query-string 'fields @timestamp",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("a log in CloudWatch: output lacks %q:\n%s", want, got)
		}
	}

	// An ECS executor's stream holds the lines of every task it runs: the query picks the task's.
	onECS := a
	onECS.LogLocation = &task.LogLocation{Group: "atf-prod-ExecutorNapLogs", Stream: "nap/executor/cd189a933e58"}
	got = print(onECS)
	for _, want := range []string{
		"attempt 2 (retriable) of task w1 logged to CloudWatch Logs",
		"log group:   atf-prod-ExecutorNapLogs", "log stream:  nap/executor/cd189a933e58",
		"time range:  2026-11-28T01:01:03Z to 2026-11-28T01:03:06Z",
		`| filter @logStream = "nap/executor/cd189a933e58" and task_id = "w1"`,
		"aws logs start-query --log-group-name 'atf-prod-ExecutorNapLogs' --start-time 1795827663 --end-time 1795827786 --query-string 'fields @timestamp",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("an ECS executor's log: output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "request id") {
		t.Errorf("an ECS executor's log names a request id:\n%s", got)
	}

	if got := print(a); !strings.Contains(got, "attempt 2 (retriable) kept no log") {
		t.Errorf("no log: %q", got)
	}
}
