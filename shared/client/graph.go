package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Graph builds tasks that wait for each other, to schedule in one batch request with
// ScheduleGraph: all or none. The usual shapes have a method each, and combine through the names
// they return:
//
//   - Chain: tasks one after another (a → b → c).
//   - Group: tasks side by side, each after the same upstreams (fan-out).
//   - Chord: a group, then a callback that waits for every task of it (fan-in).
//
// Each task added without an id gets one then (task.NewID), so scheduling the same Graph again
// replays the same batch: retry a failed call with the same Graph, never with a new one built
// alike, which would schedule the tasks twice. A batch holds at most task.MaxBatch tasks.
type Graph struct {
	// Lambda is the batch's lambda, that of every task whose request names none.
	Lambda string
	reqs   []ScheduleRequest
}

// Add adds a task that waits for the tasks of after, besides those its request names, and returns
// its name.
func (g *Graph) Add(req ScheduleRequest, after ...task.Ref) task.Ref {
	if req.ID == "" {
		req.ID = task.NewID(time.Now())
	}
	req.After = append(slices.Clone(req.After), after...)
	g.reqs = append(g.reqs, req)
	return task.Ref{Lambda: cmp.Or(req.Lambda, g.Lambda), ID: req.ID}
}

// Chain adds tasks that run one after another, the first after the tasks of after (none: at
// once), and returns their names in order: the last is the chain's end. A task of the chain runs
// once the one before it succeeded, or, under the trigger rule all_done, ended.
func (g *Graph) Chain(after []task.Ref, reqs ...ScheduleRequest) []task.Ref {
	refs := make([]task.Ref, len(reqs))
	for i, req := range reqs {
		refs[i] = g.Add(req, after...)
		after = refs[i : i+1]
	}
	return refs
}

// Group adds tasks side by side, each after the tasks of after (none: each at once), and returns
// their names.
func (g *Graph) Group(after []task.Ref, reqs ...ScheduleRequest) []task.Ref {
	refs := make([]task.Ref, len(reqs))
	for i, req := range reqs {
		refs[i] = g.Add(req, after...)
	}
	return refs
}

// Chord adds header as a group after the tasks of after, and callback after every task of header,
// and returns the callback's name. The callback runs once the whole header succeeded or, with
// TriggerRule task.TriggerAllDone, once it has ended, whatever each task's outcome.
func (g *Graph) Chord(after []task.Ref, header []ScheduleRequest, callback ScheduleRequest) task.Ref {
	return g.Add(callback, g.Group(after, header...)...)
}

// Requests returns the requests of the graph's tasks, in the order they were added: the body of
// a ScheduleBatch to the graph's lambda.
func (g *Graph) Requests() []ScheduleRequest { return slices.Clone(g.reqs) }

// ScheduleGraph schedules the graph's tasks in one batch request (see ScheduleBatch): all or none;
// created is false when the same graph was scheduled before. The API answers 422 if the tasks
// form a cycle or name an upstream that does not exist.
func (c *Client) ScheduleGraph(ctx context.Context, g *Graph) (tasks []task.Task, created bool, err error) {
	if n := len(g.reqs); n == 0 || n > task.MaxBatch {
		return nil, false, fmt.Errorf("a graph scheduled in one request holds 1 to %d tasks, this one %d", task.MaxBatch, n)
	}
	return c.ScheduleBatch(ctx, g.Lambda, g.reqs)
}
