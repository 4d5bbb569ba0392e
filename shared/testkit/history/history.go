// Package history records what every attempt of every task did, as seen by the handlers
// themselves, and checks the record against atf's promises. Tests that try to break atf (kill
// processes, lose messages, inject faults) own a history and check it at the end:
//
//   - no task is lost: every task ends in the status the test expects;
//   - no two accepted executions of one task overlap in time;
//   - claims never go backwards: a task's executions start in the order of their attempts (each
//     claim issues a new lease and counts an attempt; only a task released untried, as at a
//     graceful shutdown, runs the same attempt number again);
//   - a terminal status never changes once observed;
//   - no task runs more attempts than its maximum.
//
// Handlers append lines to a file, which survives the processes a test kills:
//
//	start <unix nanos> <task> <attempt> <worker> <pid>
//	end <unix nanos> <task> <attempt> <worker> <pid> <outcome>
//
// where worker names the process that ran the handler, uniquely over the test (pids repeat).
package history

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Execution is one run of a handler on one attempt of a task.
type Execution struct {
	Task    string
	Attempt int
	Worker  string
	PID     int
	Start   time.Time
	End     time.Time // zero if it never reported an end: its worker was killed
	Outcome string
	// Fenced marks a run whose lease was taken over while it ran (its worker was frozen), so its
	// heartbeats and result were refused. It is not an accepted execution: the overlap check
	// leaves it out, and the test must show the refusal.
	Fenced bool
}

// Kill is a worker the test killed, and when.
type Kill struct {
	Worker string
	At     time.Time
}

// Read parses a history file.
func Read(path string) ([]Execution, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byRun := map[string]*Execution{}
	var order []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		bad := func() error { return fmt.Errorf("%s:%d: malformed line %q", path, n, sc.Text()) }
		if len(fields) < 6 || (fields[0] == "end") != (len(fields) == 7) {
			return nil, bad()
		}
		nanos, err1 := strconv.ParseInt(fields[1], 10, 64)
		attempt, err2 := strconv.Atoi(fields[3])
		pid, err3 := strconv.Atoi(fields[5])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, bad()
		}
		key := strings.Join(fields[2:6], "/") // task, attempt, worker, pid
		e := byRun[key]
		if e == nil {
			e = &Execution{Task: fields[2], Attempt: attempt, Worker: fields[4], PID: pid}
			byRun[key] = e
			order = append(order, key)
		}
		switch fields[0] {
		case "start":
			e.Start = time.Unix(0, nanos)
		case "end":
			e.End, e.Outcome = time.Unix(0, nanos), fields[6]
		default:
			return nil, bad()
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]Execution, 0, len(order))
	for _, k := range order {
		out = append(out, *byRun[k])
	}
	return out, nil
}

// Final is a task as the store holds it at the end of a test.
type Final struct {
	ID          string
	Status      task.Status
	Attempts    int
	MaxAttempts int
}

// Report is what Check found.
type Report struct {
	Tasks, Executions, Kills, Duplicates        int // duplicates: executions beyond one per task
	Faults                                      int // injected by the test, which sets it
	Lost, Overlaps, Backwards, Changed, OverMax []string
}

// OK reports whether every promise held.
func (r Report) OK() bool {
	return len(r.Lost)+len(r.Overlaps)+len(r.Backwards)+len(r.Changed)+len(r.OverMax) == 0
}

// Summary is one line of figures, as `make chaos` prints per scenario.
func (r Report) Summary() string {
	return fmt.Sprintf("tasks=%d executions=%d kills=%d faults=%d duplicates=%d overlaps=%d lost=%d backwards=%d changed=%d over_max=%d",
		r.Tasks, r.Executions, r.Kills, r.Faults, r.Duplicates, len(r.Overlaps), len(r.Lost), len(r.Backwards), len(r.Changed), len(r.OverMax))
}

// Check checks executions, the workers killed, every observation of task statuses made during
// the test (in time order), and the final tasks against the promises; want is the status every
// task must end in.
func Check(execs []Execution, kills []Kill, observed [][]Final, finals []Final, want task.Status) Report {
	return CheckEach(execs, kills, observed, finals, func(string) task.Status { return want })
}

// CheckEach is Check where each task has a status of its own to end in, want(id): as in a task
// flow, where some fail and those downstream of them end upstream_failed.
func CheckEach(execs []Execution, kills []Kill, observed [][]Final, finals []Final, want func(id string) task.Status) Report {
	r := Report{Tasks: len(finals), Executions: len(execs), Kills: len(kills)}
	killedAt := map[string]time.Time{}
	for _, k := range kills {
		killedAt[k.Worker] = k.At
	}
	end := func(e Execution) time.Time {
		if !e.End.IsZero() {
			return e.End
		}
		if at, ok := killedAt[e.Worker]; ok {
			return at
		}
		return time.Unix(1<<62, 0) // still running as far as anyone knows
	}
	byTask := map[string][]Execution{}
	for _, e := range execs {
		byTask[e.Task] = append(byTask[e.Task], e)
	}
	for id, es := range byTask {
		slices.SortFunc(es, func(a, b Execution) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Attempt, b.Attempt)) })
		r.Duplicates += len(es) - 1
		accepted := slices.DeleteFunc(slices.Clone(es), func(e Execution) bool { return e.Fenced })
		for i := 1; i < len(accepted); i++ {
			prev, cur := accepted[i-1], accepted[i]
			if cur.Start.Before(end(prev)) {
				r.Overlaps = append(r.Overlaps, fmt.Sprintf("%s: attempt %d (worker %s, pid %d) started %s before attempt %d (worker %s, pid %d, ended=%v) ended",
					id, cur.Attempt, cur.Worker, cur.PID, end(prev).Sub(cur.Start), prev.Attempt, prev.Worker, prev.PID, !prev.End.IsZero()))
			}
			if cur.Attempt < prev.Attempt {
				r.Backwards = append(r.Backwards, fmt.Sprintf("%s: attempt %d ran after attempt %d", id, cur.Attempt, prev.Attempt))
			}
		}
	}
	terminal := map[string]task.Status{}
	for _, snapshot := range observed {
		for _, f := range snapshot {
			if was, ok := terminal[f.ID]; ok && was != f.Status {
				r.Changed = append(r.Changed, fmt.Sprintf("%s: %s, then %s", f.ID, was, f.Status))
			}
			if f.Status.Terminal() {
				terminal[f.ID] = f.Status
			}
		}
	}
	for _, f := range finals {
		if w := want(f.ID); f.Status != w {
			r.Lost = append(r.Lost, fmt.Sprintf("%s: %s, want %s", f.ID, f.Status, w))
		}
		if was, ok := terminal[f.ID]; ok && was != f.Status {
			r.Changed = append(r.Changed, fmt.Sprintf("%s: %s, then %s", f.ID, was, f.Status))
		}
		if f.Attempts > f.MaxAttempts {
			r.OverMax = append(r.OverMax, fmt.Sprintf("%s: %d attempts of %d", f.ID, f.Attempts, f.MaxAttempts))
		}
		for _, e := range byTask[f.ID] {
			if e.Attempt > f.MaxAttempts {
				r.OverMax = append(r.OverMax, fmt.Sprintf("%s: ran attempt %d of %d", f.ID, e.Attempt, f.MaxAttempts))
			}
		}
	}
	for _, l := range [][]string{r.Lost, r.Overlaps, r.Backwards, r.Changed, r.OverMax} {
		slices.Sort(l)
	}
	return r
}

// OverLimit checks a concurrency cap over groups of tasks (a key_concurrency, a max_running): it
// returns a line for each moment more than limit accepted executions of one group ran at once,
// group(id) naming the group of task id ("" leaves the task out). A run that reported no end
// ends when its worker was killed, as in Check; one of a worker never killed runs on.
func OverLimit(execs []Execution, kills []Kill, group func(id string) string, limit int) []string {
	killedAt := map[string]time.Time{}
	for _, k := range kills {
		killedAt[k.Worker] = k.At
	}
	type edge struct {
		at    time.Time
		delta int
		run   string
	}
	byGroup := map[string][]edge{}
	for _, e := range execs {
		g := group(e.Task)
		if g == "" || e.Fenced {
			continue
		}
		end, ok := e.End, !e.End.IsZero()
		if !ok {
			end, ok = killedAt[e.Worker]
		}
		if !ok {
			end = time.Unix(1<<62, 0)
		}
		run := fmt.Sprintf("%s attempt %d (worker %s)", e.Task, e.Attempt, e.Worker)
		byGroup[g] = append(byGroup[g], edge{e.Start, +1, run}, edge{end, -1, run})
	}
	var over []string
	for g, edges := range byGroup {
		// At equal times an end comes before a start: a slot freed and taken at once is no overlap.
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) })
		running := 0
		for _, e := range edges {
			if running += e.delta; e.delta > 0 && running > limit {
				over = append(over, fmt.Sprintf("%s: %d runs at once at %s, over %d, as %s started", g, running, e.at.Format(time.RFC3339Nano), limit, e.run))
			}
		}
	}
	slices.Sort(over)
	return over
}
