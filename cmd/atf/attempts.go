package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// attemptsUsage is the usage of atf attempts.
const attemptsUsage = `  atf attempts LAMBDA ID
      the task's latest 20 attempts, oldest first: when each started, how long it ran, how it
      ended (success, retriable, fatal, timeout, cancelled, snoozed), the worker that ran it, its error
`

func init() {
	clientCommands["attempts"] = clientCommand{2, false, "LAMBDA ID", nil,
		func(ctx context.Context, c *client.Client, pos []string, _ flagValues) (any, error) {
			return c.Attempts(ctx, pos[0], pos[1])
		}}
}

// printAttempts prints a task's history, a line an attempt, its error's first line last.
func printAttempts(w *tabwriter.Writer, h task.History) {
	if h.Dropped > 0 {
		fmt.Fprintf(w, "(%d earlier attempts not kept)\n", h.Dropped)
	}
	if len(h.Attempts) == 0 {
		fmt.Fprintln(w, "no attempt has ended yet")
		return
	}
	fmt.Fprintln(w, "ATTEMPT\tSTARTED\tDURATION\tOUTCOME\tWORKER\tERROR")
	for _, a := range h.Attempts {
		started := "-"
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.Local().Format("2006-01-02 15:04:05 MST")
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Number, started, a.Duration().Round(time.Millisecond), a.Outcome, a.Worker, firstLine(a.Error))
	}
}
