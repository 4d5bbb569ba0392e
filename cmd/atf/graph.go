package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// atf graph walks the graph around a task through the API, breadth first, so that the nearest
// tasks are shown when a bound cuts it: at most --limit tasks each way (each read once: a GET per
// upstream, a page of downstreams per task), --depth levels if given.
const (
	defaultGraphLimit = 200
	maxGraphLimit     = 10000
	// graphPages bounds the pages of downstreams read for one task: a page may hold fewer tasks
	// than asked for, even none (edges of tasks whose create failed).
	graphPages = 10
)

// graphView is what atf graph prints, and with --json answers: the task, the tasks it waits for
// (Upstreams, each with the tasks it waits for in turn) and the tasks that wait for it
// (Downstreams, each with those that wait for it in turn).
type graphView struct {
	Task        graphNode    `json:"task"`
	TriggerRule string       `json:"trigger_rule,omitempty"`
	Upstreams   []*graphNode `json:"upstreams"`
	Downstreams []*graphNode `json:"downstreams"`
	// MoreUpstreams and MoreDownstreams say that the task itself has more than shown.
	MoreUpstreams   bool `json:"more_upstreams,omitempty"`
	MoreDownstreams bool `json:"more_downstreams,omitempty"`
	// Cut says that a bound stopped a walk: the tasks marked More have more than shown.
	Cut   bool `json:"cut"`
	Limit int  `json:"limit"`
	Depth int  `json:"depth,omitempty"`
}

// graphNode is a task in the tree of a walk. A task met again (a diamond meets its top twice) is
// shown with Seen and without its own tasks, which are under its first appearance.
type graphNode struct {
	Lambda string       `json:"lambda"`
	ID     string       `json:"id"`
	Status task.Status  `json:"status"` // empty if the task no longer exists
	Error  string       `json:"error,omitempty"`
	Next   []*graphNode `json:"next,omitempty"`
	Seen   bool         `json:"seen,omitempty"`
	More   bool         `json:"more,omitempty"`
}

// walked is what a walk learned of a task: its status, the tasks next to it that the walk read,
// and whether it has more.
type walked struct {
	status task.Status
	err    string
	next   []task.Ref
	more   bool
}

func walkGraph(ctx context.Context, c *client.Client, root task.Ref, limit, depth int) (graphView, error) {
	t, err := c.Get(ctx, root.Lambda, root.ID)
	if err != nil {
		return graphView{}, err
	}
	v := graphView{Task: graphNode{Lambda: t.Lambda, ID: t.ID, Status: t.Status, Error: firstLine(t.Error)}, Limit: limit, Depth: depth}
	if len(t.After) > 0 {
		v.TriggerRule = t.TriggerRule()
	}
	ups, cutUp, err := walkUpstreams(ctx, c, t, limit, depth)
	if err != nil {
		return graphView{}, err
	}
	downs, cutDown, err := walkDownstreams(ctx, c, t, limit, depth)
	if err != nil {
		return graphView{}, err
	}
	v.Upstreams = graphTree(ups, t.Ref(), map[task.Ref]bool{t.Ref(): true})
	v.Downstreams = graphTree(downs, t.Ref(), map[task.Ref]bool{t.Ref(): true})
	v.MoreUpstreams, v.MoreDownstreams = ups[t.Ref()].more, downs[t.Ref()].more
	v.Cut = cutUp || cutDown
	return v, nil
}

// walkUpstreams reads the tasks root waits for, level by level, a GET each.
func walkUpstreams(ctx context.Context, c *client.Client, root task.Task, limit, depth int) (map[task.Ref]*walked, bool, error) {
	nodes := map[task.Ref]*walked{root.Ref(): {status: root.Status}}
	type pending struct {
		ref   task.Ref
		after []task.Ref
	}
	level := []pending{{root.Ref(), root.After}}
	read, cut := 0, false
	for d := 0; len(level) > 0; d++ {
		var next []pending
		for _, p := range level {
			w := nodes[p.ref]
			if len(p.after) > 0 && depth > 0 && d >= depth {
				w.more, cut = true, true
				continue
			}
			for _, up := range p.after {
				if up.Lambda == "" {
					up.Lambda = p.ref.Lambda
				}
				if _, ok := nodes[up]; ok {
					w.next = append(w.next, up)
					continue
				}
				if read == limit {
					w.more, cut = true, true
					break
				}
				ut, err := c.Get(ctx, up.Lambda, up.ID)
				var apiErr *client.Error
				if err != nil && (!errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound) {
					return nil, false, err
				}
				read++
				nodes[up] = &walked{status: ut.Status, err: firstLine(ut.Error)}
				w.next = append(w.next, up)
				next = append(next, pending{up, ut.After})
			}
		}
		level = next
	}
	return nodes, cut, nil
}

// walkDownstreams reads the tasks that wait for root, level by level, a page of each task's
// downstreams at a time.
func walkDownstreams(ctx context.Context, c *client.Client, root task.Task, limit, depth int) (map[task.Ref]*walked, bool, error) {
	nodes := map[task.Ref]*walked{root.Ref(): {status: root.Status}}
	level := []task.Ref{root.Ref()}
	read, cut := 0, false
	for d := 0; len(level) > 0; d++ {
		var next []task.Ref
		for _, r := range level {
			w := nodes[r]
			if depth > 0 && d >= depth {
				// The depth stops the walk here: one downstream tells whether it cut anything.
				page, more, err := c.Downstreams(ctx, r.Lambda, r.ID, "", 1)
				if err != nil {
					return nil, false, err
				}
				if len(page) > 0 || more != "" {
					w.more, cut = true, true
				}
				continue
			}
			cursor := ""
			for pages := 0; ; pages++ {
				if pages == graphPages {
					w.more, cut = true, true
					break
				}
				// Past the budget, pages still show the tasks already read, and tell a cut from an end.
				page, after, err := c.Downstreams(ctx, r.Lambda, r.ID, cursor, min(limit+1, task.MaxListLimit))
				if err != nil {
					return nil, false, err
				}
				for _, down := range page {
					dr := down.Ref()
					if _, ok := nodes[dr]; ok {
						w.next = append(w.next, dr)
						continue
					}
					if read == limit {
						w.more, cut = true, true
						break
					}
					read++
					nodes[dr] = &walked{status: down.Status}
					w.next = append(w.next, dr)
					next = append(next, dr)
				}
				if cursor = after; cursor == "" || w.more {
					break
				}
			}
		}
		level = next
	}
	return nodes, cut, nil
}

// graphTree lays out a walk from r as a tree, depth first; a task already in the tree (shown) comes
// again as Seen, without its own.
func graphTree(nodes map[task.Ref]*walked, r task.Ref, shown map[task.Ref]bool) []*graphNode {
	var out []*graphNode
	for _, n := range nodes[r].next {
		w := nodes[n]
		g := &graphNode{Lambda: n.Lambda, ID: n.ID, Status: w.status, Error: w.err}
		if shown[n] {
			g.Seen = true
		} else {
			shown[n] = true
			g.More = w.more
			g.Next = graphTree(nodes, n, shown)
		}
		out = append(out, g)
	}
	return out
}

// printGraph prints the task on a line of its own, then its upstreams and its downstreams as
// indented trees, one task a line: LAMBDA/ID, its status, and the first line of its error. Each
// upstream is indented under the task that waits for it, each downstream under the task it waits
// for. A task met again is marked "(see above)"; "..." under a task stands for the tasks next to
// it that a bound left out.
func printGraph(w io.Writer, v graphView) {
	line := func(indent int, n graphNode, note string) {
		status := string(n.Status)
		if status == "" {
			status = "(not found)"
		}
		if note != "" {
			status += "  " + note
		}
		fmt.Fprintf(w, "%s%s/%s  %s\n", strings.Repeat("  ", indent), n.Lambda, n.ID, status)
	}
	root := ""
	if v.TriggerRule != "" {
		root = "trigger rule " + v.TriggerRule
	}
	if v.Task.Error != "" {
		root = strings.TrimPrefix(root+"; "+v.Task.Error, "; ")
	}
	line(0, v.Task, root)
	var walk func(indent int, nodes []*graphNode)
	walk = func(indent int, nodes []*graphNode) {
		for _, n := range nodes {
			switch {
			case n.Seen:
				line(indent, *n, "(see above)")
			default:
				line(indent, *n, n.Error)
				walk(indent+1, n.Next)
				if n.More {
					fmt.Fprintf(w, "%s...\n", strings.Repeat("  ", indent+1))
				}
			}
		}
	}
	for _, part := range []struct {
		title string
		nodes []*graphNode
		more  bool
	}{
		{"upstreams (it waits for them):", v.Upstreams, v.MoreUpstreams},
		{"downstreams (they wait for it):", v.Downstreams, v.MoreDownstreams},
	} {
		fmt.Fprintln(w, part.title)
		if len(part.nodes) == 0 && !part.more {
			fmt.Fprintln(w, "  none")
		}
		walk(1, part.nodes)
		if part.more {
			fmt.Fprintln(w, "  ...")
		}
	}
	if v.Cut {
		bound := fmt.Sprintf("--limit %d tasks each way", v.Limit)
		if v.Depth > 0 {
			bound += fmt.Sprintf(" or --depth %d", v.Depth)
		}
		fmt.Fprintf(w, "cut at %s: \"...\" marks tasks with more not shown\n", bound)
	}
}
