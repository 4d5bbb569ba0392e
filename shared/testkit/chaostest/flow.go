package chaostest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/history"
	"github.com/openatf/atf/shared/worker"
)

// DAG is a graph of tasks that wait for each other, for the flow scenarios: its tasks are in an
// order where every upstream comes before its downstreams, and their ids are unique over every
// lambda, so that a history (which names tasks by id) tells them apart.
type DAG struct {
	Tasks []DAGTask
}

// DAGTask is a task of a DAG.
type DAGTask struct {
	Lambda, ID string
	After      []task.Ref
	AllDone    bool // trigger rule all_done instead of all_success
	Fail       bool // its handler fails fatally, on every attempt
}

// Ref is the task's name.
func (d DAGTask) Ref() task.Ref { return task.Ref{Lambda: d.Lambda, ID: d.ID} }

// FlowPayload is the payload of a DAG's task: what its handler needs to check that it was let
// run rightly, and whether to fail.
type FlowPayload struct {
	Ups     int  `json:"ups"`
	AllDone bool `json:"all_done,omitempty"`
	Fail    bool `json:"fail,omitempty"`
}

// RandomDAG builds a layered DAG of n tasks over lambdas: layers of 1 to 2·√n tasks, each task
// past the first layer waiting for 1 to 3 tasks of the layers just above it, and a few (one in
// 50) gathering up to 50 of them (fan-in); some tasks, picked the more often the more they are
// named, fan out to many. One task in 8 with upstreams is all_done, and about one in 1,000 (at least 2) of
// the last third fails.
func RandomDAG(rng *rand.Rand, n int, lambdas []string) DAG {
	var d DAG
	var layers [][]int // indexes into d.Tasks
	width := max(2, int(2*math.Sqrt(float64(n))))
	fails := max(2, n/1000)
	for len(d.Tasks) < n {
		size := min(1+rng.IntN(width), n-len(d.Tasks))
		var layer []int
		for range size {
			i := len(d.Tasks)
			t := DAGTask{Lambda: lambdas[rng.IntN(len(lambdas))], ID: fmt.Sprintf("dag-%05d", i)}
			if len(layers) > 0 {
				// Upstreams from the last 3 layers, mostly the last.
				var pool []int
				for _, l := range layers[max(0, len(layers)-3):] {
					pool = append(pool, l...)
				}
				k := 1 + rng.IntN(3)
				if rng.IntN(50) == 0 {
					k = 10 + rng.IntN(41)
				}
				k = min(k, len(pool))
				picked := map[int]bool{}
				for len(picked) < k {
					var j int
					if rng.IntN(4) == 0 {
						j = pool[rng.IntN(min(len(pool), 3))] // a few tasks fan out widely
					} else {
						j = pool[rng.IntN(len(pool))]
					}
					picked[j] = true
				}
				for _, j := range slices.Sorted(maps.Keys(picked)) {
					t.After = append(t.After, d.Tasks[j].Ref())
				}
				t.AllDone = rng.IntN(8) == 0
			}
			d.Tasks = append(d.Tasks, t)
			layer = append(layer, i)
		}
		layers = append(layers, layer)
	}
	for range fails { // in the last third, so that most of the graph runs
		d.Tasks[len(d.Tasks)-1-rng.IntN(max(1, len(d.Tasks)/3))].Fail = true
	}
	return d
}

// Batches returns the DAG's schedule requests, size (at most task.MaxBatch) a batch, in order: a
// batch's tasks wait for tasks of earlier batches or of their own. Each request names its lambda.
func (d DAG) Batches(size int) [][]client.ScheduleRequest {
	var out [][]client.ScheduleRequest
	for i := 0; i < len(d.Tasks); i += size {
		var batch []client.ScheduleRequest
		for _, t := range d.Tasks[i:min(i+size, len(d.Tasks))] {
			p, _ := json.Marshal(FlowPayload{Ups: len(t.After), AllDone: t.AllDone, Fail: t.Fail})
			r := client.ScheduleRequest{Lambda: t.Lambda, ID: t.ID, Payload: p, After: t.After}
			if t.AllDone {
				r.TriggerRule = task.TriggerAllDone
			}
			batch = append(batch, r)
		}
		out = append(out, batch)
	}
	return out
}

// Want is the status each task must end in, by id: a task whose upstreams let it run succeeds,
// or ends fatal_failure if it fails; under all_success an upstream that did not succeed ends it
// upstream_failed.
func (d DAG) Want() map[string]task.Status {
	want := make(map[string]task.Status, len(d.Tasks))
	for _, t := range d.Tasks {
		s := task.StatusSuccess
		if t.Fail {
			s = task.StatusFatalFailure
		}
		for _, up := range t.After {
			if !t.AllDone && want[up.ID] != task.StatusSuccess {
				s = task.StatusUpstreamFailed
			}
		}
		want[t.ID] = s
	}
	return want
}

// Early lists the executions that started before their upstreams allowed: under all_success,
// before some upstream had a successful execution that ended (a successful run's end comes
// before its result is written, so a downstream that starts earlier cannot have seen it); under
// all_done, before some upstream that ran had an execution that ended. Runs of a worker killed
// mid-way have no end and count for nothing.
func (d DAG) Early(execs []history.Execution) []string {
	ends := map[string][]history.Execution{}
	for _, e := range execs {
		if !e.End.IsZero() {
			ends[e.Task] = append(ends[e.Task], e)
		}
	}
	byID := make(map[string]DAGTask, len(d.Tasks))
	for _, t := range d.Tasks {
		byID[t.ID] = t
	}
	want := d.Want()
	var out []string
	for _, e := range execs {
		t, ok := byID[e.Task]
		if !ok {
			continue
		}
		if want[t.ID] == task.StatusUpstreamFailed {
			out = append(out, fmt.Sprintf("%s (attempt %d) ran, but an upstream of it must fail", e.Task, e.Attempt))
			continue
		}
		for _, up := range t.After {
			if t.AllDone && want[up.ID] == task.StatusUpstreamFailed {
				continue // it never ran
			}
			if !slices.ContainsFunc(ends[up.ID], func(u history.Execution) bool {
				return u.End.Before(e.Start) && (t.AllDone || u.Outcome == "success")
			}) {
				out = append(out, fmt.Sprintf("%s (attempt %d) started at %s before its upstream %s had ended as it must", e.Task, e.Attempt, e.Start.Format(time.StampMicro), up.ID))
			}
		}
	}
	slices.Sort(out)
	return out
}

// FlowNode is the Go handler of a DAG's tasks: it records each run in History, checks its
// Inputs against its payload (FlowPayload: as many inputs as upstreams, each ended, and each a
// success with its result under all_success) and keeps what it found wrong, then fails fatally
// if its payload says so, or returns {"id": its id}.
type FlowNode struct {
	History *History
	Worker  string
	Work    func(ctx context.Context, t worker.Task) error // optional, before the checks

	mu         sync.Mutex
	violations []string
}

// NodeResult is what a FlowNode returns.
type NodeResult struct {
	ID string `json:"id"`
}

// Violations lists the runs that were let start before their upstreams allowed, or with wrong
// inputs.
func (n *FlowNode) Violations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.violations)
}

func (n *FlowNode) violate(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.violations = append(n.violations, fmt.Sprintf(format, args...))
}

func (n *FlowNode) Handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	e := history.Execution{Task: t.ID, Attempt: t.Attempt, Worker: n.Worker, Start: time.Now()}
	n.History.started(n.Worker, t.ID, 1)
	defer n.History.started(n.Worker, t.ID, -1)
	var p FlowPayload
	err := json.Unmarshal(t.Payload, &p)
	if err != nil {
		err = worker.Fatal(fmt.Errorf("payload: %w", err))
	} else if n.Work != nil {
		err = n.Work(ctx, t)
	}
	if err == nil {
		n.check(t, p)
		if p.Fail {
			err = worker.Fatal(fmt.Errorf("task %s fails, as its payload says", t.ID))
		}
	}
	e.End, e.Outcome = time.Now(), "success"
	switch {
	case ctx.Err() != nil:
		e.Outcome = "cancelled"
	case err != nil:
		e.Outcome = "error"
	}
	n.History.record(e)
	if err != nil {
		return nil, err
	}
	return json.Marshal(NodeResult{ID: t.ID})
}

// check records what is wrong with a run's inputs.
func (n *FlowNode) check(t worker.Task, p FlowPayload) {
	if len(t.Inputs) != p.Ups {
		n.violate("%s: %d inputs, want %d", t.ID, len(t.Inputs), p.Ups)
	}
	for _, in := range t.Inputs {
		switch {
		case !in.Status.Terminal():
			n.violate("%s ran while its upstream %s was %s", t.ID, in.ID, in.Status)
		case !p.AllDone && in.Status != task.StatusSuccess:
			n.violate("%s (all_success) ran after its upstream %s ended %s", t.ID, in.ID, in.Status)
		case in.Status == task.StatusSuccess:
			var r NodeResult
			if json.Unmarshal(in.Result, &r) != nil || r.ID != in.ID {
				n.violate("%s got the result %s from its upstream %s", t.ID, in.Result, in.ID)
			}
		}
	}
}

func (h *History) record(e history.Execution) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execs = append(h.execs, e)
}
