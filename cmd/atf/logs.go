package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// logsUsage is the usage of atf logs.
const logsUsage = `  atf logs LAMBDA ID [--attempt N]
      the log of the task's latest ended attempt, or of attempt N: on atf dev, the last 16 KiB
      its handler wrote to standard error (a Go handler: its slog, log and fmt.Print output);
      on AWS, where it is in CloudWatch Logs, and a Logs Insights query for it
`

func init() {
	clientCommands["logs"] = clientCommand{2, false, "LAMBDA ID", []string{"attempt"},
		func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
			n, err := o.intFlag("attempt", 0)
			if err != nil {
				return nil, err
			}
			if n < 0 {
				return nil, fmt.Errorf("--attempt must be a number from 1, got %d", n)
			}
			a, err := c.AttemptLog(ctx, pos[0], pos[1], n)
			return attemptLog{Attempt: a, id: pos[1]}, err
		}}
}

// attemptLog is what atf logs prints: with --json, the attempt as the API answers it.
type attemptLog struct {
	task.Attempt
	id string // the task's
}

// logWindow widens an attempt's times in a Logs Insights query, for the clock skew between the
// store's clock and CloudWatch's.
const logWindow = time.Minute

// printLog prints an attempt's log as it was written; or where it is in CloudWatch Logs, with a
// Logs Insights query and the AWS CLI command that runs it; or says why there is none.
func printLog(out io.Writer, a attemptLog) {
	l := a.LogLocation
	switch {
	case a.Log != "":
		fmt.Fprint(out, a.Log)
		if !strings.HasSuffix(a.Log, "\n") {
			fmt.Fprintln(out)
		}
	case l != nil:
		start, end := a.StartedAt, a.EndedAt
		if start.IsZero() {
			start = end
		}
		start, end = start.Add(-logWindow), end.Add(logWindow)
		fmt.Fprintf(out, "attempt %d (%s) of task %s logged to CloudWatch Logs:\n", a.Number, a.Outcome, a.id)
		fmt.Fprintf(out, "  log group:   %s\n  log stream:  %s\n", l.Group, l.Stream)
		if l.RequestID != "" {
			fmt.Fprintf(out, "  request id:  %s\n", l.RequestID)
		}
		fmt.Fprintf(out, "  time range:  %s to %s\n", start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
		query := insightsQuery(l, a.id)
		fmt.Fprintf(out, "\nLogs Insights query (on the log group, over the time range):\n%s\n", query)
		fmt.Fprintf(out, "\naws logs start-query --log-group-name %s --start-time %d --end-time %d --query-string %s\n",
			shellQuote(l.Group), start.Unix(), end.Unix(), shellQuote(query))
		fmt.Fprintln(out, "aws logs get-query-results --query-id QUERY_ID   # the queryId start-query printed")
	default:
		fmt.Fprintf(out, "attempt %d (%s) kept no log: its handler wrote nothing to standard error, or its store keeps no logs and its worker named no log location\n", a.Number, a.Outcome)
	}
}

// insightsQuery is a Logs Insights query for the lines of task id's attempt logged at l.
func insightsQuery(l *task.LogLocation, id string) string {
	stream := "@logStream = " + strconv.Quote(l.Stream)
	if l.RequestID != "" {
		// A worker function's: a log stream is one execution environment, which runs one
		// invocation at a time. In the attempt's time range it holds the attempt's lines, and
		// those of the other records of its batch, if any, which the task id and request id tell
		// apart where a line has them.
		return "fields @timestamp, @requestId, @message\n| filter " + stream + "\n| sort @timestamp asc"
	}
	// An ECS executor's: its stream holds the lines of all the tasks it runs at once, and names
	// the task in each line about it, its handler's output too (executor.Config.LogHandlerOutput).
	// Its attempt field counts the runs of the task's current life (a redrive or a snooze sets it
	// back), so the attempt's time range, not that field, picks the attempt.
	return "fields @timestamp, attempt, msg, line, err\n| filter " + stream + " and task_id = " + strconv.Quote(id) + "\n| sort @timestamp asc"
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
