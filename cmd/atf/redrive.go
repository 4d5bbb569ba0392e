package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// boolFlags are the client flags that take no value.
var boolFlags = map[string]bool{"all": true}

var redriveFlags = []string{"all", "status", "collection", "created-from", "created-to", "limit", "payload", "priority", "max-attempts"}

// listFilterFlags reads --status (one or several, comma-separated), --created-from and
// --created-to into p.
func listFilterFlags(o flagValues, p *task.ListParams) error {
	for _, v := range o["status"] {
		for _, st := range strings.Split(v, ",") {
			if st != "" {
				p.Statuses = append(p.Statuses, task.Status(st))
			}
		}
	}
	for name, at := range map[string]*time.Time{"created-from": &p.CreatedFrom, "created-to": &p.CreatedTo} {
		if v := o.get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("--%s %q is not an RFC 3339 time, such as 2026-01-02T15:04:05Z", name, v)
			}
			*at = t
		}
	}
	return nil
}

// redrivePageTimeout bounds each request of a redrive by filter: a redrive of many pages takes
// as long as it needs, each request on its own deadline.
const redrivePageTimeout = 30 * time.Second

// redriveView is what `atf redrive` did: one task, or the counts of a redrive by filter.
type redriveView struct {
	Task   *task.Task          `json:"task,omitempty"`
	Result *task.RedriveResult `json:"result,omitempty"`
}

// redrive runs `atf redrive LAMBDA ID` or `atf redrive LAMBDA [filters | --all]`. A redrive by
// filter goes a page per request, printing its running counts to stderr after each.
func redrive(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
	var opts task.RedriveOptions
	var err error
	if opts.Payload, err = o.payload(); err != nil {
		return nil, err
	}
	opts.Priority = o.get("priority")
	if opts.MaxAttempts, err = o.intFlag("max-attempts", 0); err != nil {
		return nil, err
	}
	if len(pos) > 2 {
		return nil, fmt.Errorf("redrive takes LAMBDA and at most one ID")
	}
	filtered := len(o["status"])+len(o["collection"])+len(o["created-from"])+len(o["created-to"]) > 0
	all := len(o["all"]) > 0
	if len(pos) == 2 {
		if filtered || all {
			return nil, fmt.Errorf("give an ID, or filters (or --all), not both")
		}
		t, err := c.Redrive(ctx, pos[0], pos[1], opts)
		if err != nil {
			return nil, err
		}
		return redriveView{Task: &t}, nil
	}
	if !filtered && !all {
		return nil, fmt.Errorf("give an ID, filters (--status, --collection, --created-from, --created-to), or --all to redrive every failed task")
	}
	p := task.ListParams{Lambda: pos[0], Collection: o.get("collection")}
	if err := listFilterFlags(o, &p); err != nil {
		return nil, err
	}
	if p.Limit, err = o.intFlag("limit", 0); err != nil {
		return nil, err
	}
	r, err := redriveAll(context.WithoutCancel(ctx), c, p, opts, os.Stderr)
	return redriveView{Result: &r}, err
}

// redriveAll redrives page after page, each request on its own deadline, and prints the running
// counts to progress after each page.
func redriveAll(ctx context.Context, c *client.Client, p task.ListParams, o task.RedriveOptions, progress io.Writer) (task.RedriveResult, error) {
	var total task.RedriveResult
	for pages := 1; ; pages++ {
		pctx, cancel := context.WithTimeout(ctx, redrivePageTimeout)
		r, err := c.RedrivePage(pctx, p, o)
		cancel()
		if err != nil {
			// The tasks redriven so far are no longer failed: the same command again goes on.
			return total, fmt.Errorf("%w (after %d pages: %s; run the command again to go on)", err, pages-1, total)
		}
		total.Redriven += r.Redriven
		total.Skipped += r.Skipped
		total.Skips = append(total.Skips, r.Skips...)
		fmt.Fprintf(progress, "page %d: %s\n", pages, total)
		if r.Next == "" {
			return total, nil
		}
		p.Cursor = r.Next
	}
}

func printRedrive(w *tabwriter.Writer, v redriveView) {
	if v.Task != nil {
		fmt.Fprintf(w, "%s\t%s\tattempts 0 of %d\n", v.Task.ID, v.Task.Status, v.Task.MaxAttempts)
		return
	}
	fmt.Fprintf(w, "redriven:\t%d\n", v.Result.Redriven)
	fmt.Fprintf(w, "skipped:\t%d\n", v.Result.Skipped)
	for _, s := range v.Result.Skips {
		fmt.Fprintf(w, "  %s\t%s\n", s.ID, firstLine(s.Reason))
	}
}
