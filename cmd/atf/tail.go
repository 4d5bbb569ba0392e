package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/service/lifecycle"
)

// atf tail LAMBDA follows a lambda's transitions live. There is no push from the API: it
// long-polls atf dev's live feed of lifecycle events (GET /v1/lambdas/{lambda}/events), which
// keeps the latest events in memory (lifecycle.Feed). On AWS the API has no such feed and says
// so; the events are on EventBridge.
func init() {
	boolFlags["now"] = true
	streamCommands["tail"] = streamCommand{clientCommand{1, false, "LAMBDA", []string{"now"}, nil}, tail}
}

const tailUsage = `  atf tail LAMBDA [--now]
      follow the lambda's transitions live, one line each (a JSON event a line with --json),
      from the oldest that atf dev keeps (its latest 2048 events), or only new ones with --now,
      until interrupted; atf dev only: on AWS, subscribe to the lifecycle events on EventBridge
`

// tailWait is how long each request waits for an event; tailTimeout bounds the request.
const (
	tailWait    = 20 * time.Second
	tailTimeout = tailWait + 10*time.Second
)

func tail(ctx context.Context, c *client.Client, pos []string, o flagValues, out io.Writer, asJSON bool) error {
	cursor := ""
	if len(o["now"]) > 0 {
		cursor = lifecycle.FromNow
	}
	enc := json.NewEncoder(out)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, tailTimeout)
		page, err := c.Events(rctx, pos[0], cursor, 0, tailWait)
		cancel()
		if ctx.Err() != nil {
			return nil // interrupted: the normal end
		}
		var apiErr *client.Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotImplemented {
			return errors.New(apiErr.Message)
		}
		if err != nil {
			return err
		}
		if page.Missed > 0 {
			if asJSON {
				err = enc.Encode(map[string]uint64{"missed": page.Missed})
			} else {
				_, err = fmt.Fprintf(out, "... %d events missed: atf dev keeps its latest events only\n", page.Missed)
			}
			if err != nil {
				return err
			}
		}
		for _, e := range page.Events {
			if asJSON {
				err = enc.Encode(e)
			} else {
				_, err = fmt.Fprintln(out, tailLine(e))
			}
			if err != nil {
				return err
			}
		}
		cursor = page.NextCursor
	}
	return nil
}

// tailLine is an event on one line: time, task, type, the status it moved from and to, the
// attempt, and the error's first line.
func tailLine(e lifecycle.Event) string {
	from := string(e.PreviousStatus)
	if from == "" {
		from = "-"
	}
	line := fmt.Sprintf("%s  %-20s  %-15s  %s -> %s  attempt %d/%d", e.Time.Local().Format("15:04:05.000"), e.TaskID, e.Type, from, e.Status, e.Attempt, e.MaxAttempts)
	if e.Error != "" {
		line += "  " + firstLine(e.Error)
	}
	return line
}
