package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// runCancel cancels one task (LAMBDA ID), or every task a filter selects (LAMBDA --collection
// --status), a bounded page per request until the last.
func runCancel(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
	f := client.CancelFilter{Collection: o.get("collection"), Status: task.Status(o.get("status")), Cursor: o.get("cursor")}
	bulk := f.Collection != "" || f.Status != "" || f.Cursor != ""
	switch {
	case len(pos) == 2 && !bulk:
		return c.Cancel(ctx, pos[0], pos[1])
	case len(pos) == 1 && bulk:
		sum, err := c.CancelAll(ctx, pos[0], f)
		if err != nil {
			// What was done stands; the cursor goes on from where it stopped.
			return nil, fmt.Errorf("%w (so far: %d cancelled, %d cancel requested, %d skipped; go on with --cursor %s)",
				err, sum.Cancelled, sum.CancelRequested, sum.Skipped, sum.NextCursor)
		}
		return sum, nil
	}
	return nil, errors.New("cancel takes LAMBDA ID, or LAMBDA with --collection and/or --status")
}

func printCancelPage(line func(...string), p client.CancelPage) {
	line("cancelled:", fmt.Sprint(p.Cancelled))
	line("cancel_requested:", fmt.Sprint(p.CancelRequested))
	line("skipped:", fmt.Sprint(p.Skipped))
}
