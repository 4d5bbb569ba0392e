package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Task flows: a task may wait for other tasks, its upstreams, named in its After. It is pending
// until they have ended, then runs with their results (Task.Inputs). How an upstream's end
// reaches its downstreams:
//
//   - Scheduling a task with upstreams writes an Edge under each upstream (Store.AddEdges), then
//     creates the task pending, due at once for a check, then marks each upstream as having
//     downstreams (MarkDownstream). A mark is written only once a task that waits exists, so a
//     request that fails marks nothing (a marked task cannot be redriven).
//   - The check (the consumer's sweep of pending tasks, Check) reads every upstream, marks those
//     not marked yet (the scheduler may have died before it did), and settles those that have
//     ended, as marked: this covers every upstream that ended before the check.
//   - An upstream with downstreams keeps a trigger once it ends (next), and one marked after it
//     ended gets one then, so the consumer's sweep of ended tasks finds it, walks its edges
//     (Store.Downstreams) and settles each downstream (Settle), then clears the trigger
//     (Notified). This covers every upstream that ends after the check, since it was marked
//     before the check cleared its trigger.
//
// Settling is idempotent (a bit per upstream) and conditional like every transition, so a sweep
// repeated after a crash, or two consumers, settle each upstream of a task once.

// Ref names a task of any lambda.
type Ref struct {
	Lambda string `json:"lambda"`
	ID     string `json:"id"`
}

func (r Ref) String() string { return r.Lambda + "/" + r.ID }

// UnmarshalJSON takes {"lambda": ..., "id": ...}, a string "LAMBDA/ID" (an id has no '/'), or
// a bare id string, which leaves Lambda empty: the lambda of the task that names it (see
// ResolveRefs).
func (r *Ref) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		lambda, id, found := strings.Cut(s, "/")
		if !found {
			*r = Ref{ID: s}
			return nil
		}
		if lambda == "" || id == "" {
			return fmt.Errorf(`upstream %q: a string upstream is ID or LAMBDA/ID`, Echo(s))
		}
		*r = Ref{Lambda: lambda, ID: id}
		return nil
	}
	type plain Ref
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf(`an upstream is a task id, "LAMBDA/ID" or {"lambda": ..., "id": ...}`)
	}
	*r = Ref(p)
	return nil
}

// Edge records that task Down waits for task Up: Up is Down's After[Index]. The store keeps it
// under Up, so that Up's end finds its downstreams.
type Edge struct {
	Up    Ref `json:"up"`
	Down  Ref `json:"down"`
	Index int `json:"index"`
}

// Trigger rules: when a pending task may run.
const (
	// TriggerAllSuccess (the default) runs the task once every upstream succeeded; an upstream
	// that ends any other way ends the task as upstream_failed at once.
	TriggerAllSuccess = "all_success"
	// TriggerAllDone runs the task once every upstream has ended, whatever its outcome.
	TriggerAllDone = "all_done"
)

// Flow limits.
const (
	// MaxAfter is how many upstreams one task may have.
	MaxAfter = 10000
	// MaxInputBytes bounds the upstream results handed to one run (Task.Inputs), in bytes of
	// JSON: a worker function receives them in a Lambda response, which holds at most 6 MB. A
	// task whose upstreams' results are larger ends as fatal_failure, saying so.
	MaxInputBytes = 4 << 20
)

// InputGone is the error of an Input whose upstream no longer exists: the store's retention (30
// days by default on DynamoDB) removed it while the downstream waited. Its status is empty.
const InputGone = "the upstream task no longer exists: the store's retention removed it, and its result with it"

// Input is an upstream's outcome as a downstream run receives it.
type Input struct {
	Lambda string          `json:"lambda"`
	ID     string          `json:"id"`
	Status Status          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Bitmap is a set of small integers, one bit each: which upstreams of a task are settled.
type Bitmap []byte

// Has reports whether i is in the set.
func (b Bitmap) Has(i int) bool { return i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0 }

// With returns the set with i added, grown if need be.
func (b Bitmap) With(i int) Bitmap {
	if need := i/8 + 1; need > len(b) {
		b = append(b, make([]byte, need-len(b))...)
	}
	b[i/8] |= 1 << (i % 8)
	return b
}

// Count is how many of 0..n-1 are in the set.
func (b Bitmap) Count(n int) int {
	c := 0
	for i := range n {
		if b.Has(i) {
			c++
		}
	}
	return c
}

// ResolveRefs fills in the lambda of refs that name a task of lambda by bare id, and checks them.
func ResolveRefs(lambda string, refs []Ref) ([]Ref, error) {
	if len(refs) > MaxAfter {
		return nil, Errorf(ErrInvalid, "after: a task may wait for at most %d upstreams, got %d", MaxAfter, len(refs))
	}
	out := make([]Ref, len(refs))
	seen := make(map[Ref]bool, len(refs))
	for i, r := range refs {
		if r.Lambda == "" {
			r.Lambda = lambda
		}
		if err := ValidateName("after: lambda", r.Lambda); err != nil {
			return nil, err
		}
		if err := ValidateID("after: id", r.ID); err != nil {
			return nil, err
		}
		if seen[r] {
			return nil, Errorf(ErrInvalid, "after: upstream %s is listed twice", r)
		}
		seen[r] = true
		out[i] = r
	}
	return out, nil
}

// succeededOr reports whether an upstream that ended with status s lets a task with trigger rule
// rule run.
func (s Status) lets(rule string) bool { return s == StatusSuccess || rule == TriggerAllDone }

// MarkDownstream records that tasks wait for t. An ended t gets a trigger, so the consumer tells
// them (see Notified). It returns ErrExists if t is already marked: nothing to write.
func MarkDownstream(t Task, now time.Time) (Task, error) {
	if t.Downstream {
		return t, Errorf(ErrExists, "task %s already has downstreams", t.ID)
	}
	trigger := t.NextTriggerAt
	if t.Status.Terminal() {
		trigger = at(now)
	}
	t = t.next(t.Status, now, trigger)
	t.Downstream = true
	return t, nil
}

// Settled is an upstream's end as a downstream learns it.
type Settled struct {
	Index  int // in the downstream's After
	Up     Ref
	Status Status // terminal
	// Gone is an upstream that no longer exists (a store's retention removed it after it was
	// named): it counts as ended, not as succeeded.
	Gone bool
}

// Settle records that upstreams of a pending task have ended. An upstream already settled is
// skipped, so settling again is harmless. Under all_success, an upstream that did not succeed
// ends the task as upstream_failed, naming it; once every upstream is settled, the task is
// unblocked (new, due at its run time). It returns ErrNotDue when nothing changes, and ErrConflict
// when the task is no longer pending.
func Settle(t Task, ups []Settled, now time.Time) (Task, error) {
	if err := notFrom(t, "settle", StatusPending); err != nil {
		return t, err
	}
	changed := false
	for _, u := range ups {
		if u.Index < 0 || u.Index >= t.AfterCount || t.Settled.Has(u.Index) || (!u.Status.Terminal() && !u.Gone) {
			continue
		}
		t.Settled = slices.Clone(t.Settled).With(u.Index)
		changed = true
		switch {
		case u.Gone && t.TriggerRule() != TriggerAllDone:
			t = t.next(StatusUpstreamFailed, now, nil)
			t.Error = fmt.Sprintf("upstream %s no longer exists: the store's retention removed it before this task learnt how it ended", u.Up)
			return t, nil
		case !u.Gone && !u.Status.lets(t.TriggerRule()):
			t = t.next(StatusUpstreamFailed, now, nil)
			t.Error = fmt.Sprintf("upstream %s ended %s", u.Up, u.Status)
			return t, nil
		}
	}
	if !changed {
		return t, Errorf(ErrNotDue, "task %s: nothing to settle", t.ID)
	}
	if t.Settled.Count(t.AfterCount) == t.AfterCount {
		return Unblock(t, now)
	}
	return t.next(StatusPending, now, t.NextTriggerAt), nil
}

// Checked ends the check of a pending task (see the package's flow notes): its trigger is cleared,
// after the upstreams that had ended were settled.
func Checked(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "check", StatusPending); err != nil {
		return t, err
	}
	return t.next(StatusPending, now, nil), nil
}

// Notified records that the consumer has told an ended task's downstreams of its end, up to the
// edge cursor; done clears the trigger, otherwise the task stays due with the cursor to go on.
func Notified(t Task, cursor string, done bool, now time.Time) (Task, error) {
	if !t.Status.Terminal() || t.NextTriggerAt == nil {
		return t, Errorf(ErrConflict, "task %s is %s with no downstreams to tell", t.ID, t.Status)
	}
	trigger := t.NextTriggerAt
	if done {
		trigger, cursor = nil, ""
	}
	t.From, t.UpdatedAt, t.NextTriggerAt = t.Status, now, trigger
	t.Version++
	t.NotifyCursor = cursor
	return t, nil
}

// AddUpstreams adds upstreams to a task that has not started (pending, new or enqueued): it is
// pending again until they have ended, and due at once for a check. The caller has checked that
// no cycle results. refs must be resolved (ResolveRefs) and t read with its After.
func AddUpstreams(t Task, refs []Ref, now time.Time) (Task, error) {
	if err := notFrom(t, "add upstreams to", StatusPending, StatusNew, StatusEnqueued); err != nil {
		return t, err
	}
	if t.Attempts > 0 {
		return t, Errorf(ErrConflict, "task %s has run before; only a task that has not started takes upstreams", t.ID)
	}
	if len(t.After) != t.AfterCount {
		return t, fmt.Errorf("task %s was read without its upstreams", t.ID)
	}
	if t.AfterCount+len(refs) > MaxAfter {
		return t, Errorf(ErrInvalid, "after: a task may wait for at most %d upstreams; %s has %d and %d more were given", MaxAfter, t.ID, t.AfterCount, len(refs))
	}
	for _, r := range refs {
		if slices.Contains(t.After, r) {
			return t, Errorf(ErrInvalid, "after: %s is already an upstream of %s", r, t.ID)
		}
	}
	t = t.next(StatusPending, now, at(now))
	if t.Trigger == "" {
		t.Trigger = TriggerAllSuccess
	}
	t.After = append(slices.Clone(t.After), refs...)
	t.AfterCount = len(t.After)
	return t, nil
}

// EndCycle ends a pending task found on a cycle of upstreams, which two AddUpstreams calls at once
// can close (each checked before the other wrote): it would wait for itself forever.
func EndCycle(t Task, cycle []string, now time.Time) (Task, error) {
	if err := notFrom(t, "end", StatusPending); err != nil {
		return t, err
	}
	t = t.next(StatusUpstreamFailed, now, nil)
	t.Error = "its upstreams wait for it through a cycle (each waits for the next): " + strings.Join(cycle, " → ")
	return t, nil
}

// TriggerRule is the task's trigger rule, all_success if it has none.
func (t Task) TriggerRule() string {
	if t.Trigger == "" {
		return TriggerAllSuccess
	}
	return t.Trigger
}

// Ref is the task's name.
func (t Task) Ref() Ref { return Ref{Lambda: t.Lambda, ID: t.ID} }

// Edges are the edges from t's upstreams to t.
func (t Task) Edges() []Edge {
	e := make([]Edge, len(t.After))
	for i, up := range t.After {
		e[i] = Edge{Up: up, Down: t.Ref(), Index: i}
	}
	return e
}

// FindCycle returns a cycle among tasks (ids as "lambda/id", in order, the first repeated at the
// end), or nil. after maps a task to its upstreams; tasks not in it have none known.
func FindCycle(after map[Ref][]Ref) []string {
	const (
		unseen = iota
		open
		closed
	)
	state := make(map[Ref]int, len(after))
	var path []Ref
	var cycle []string
	var visit func(r Ref) bool
	visit = func(r Ref) bool {
		switch state[r] {
		case open:
			i := slices.Index(path, r)
			for _, p := range path[i:] {
				cycle = append(cycle, p.String())
			}
			cycle = append(cycle, r.String())
			return true
		case closed:
			return false
		}
		state[r] = open
		path = append(path, r)
		for _, up := range after[r] {
			if visit(up) {
				return true
			}
		}
		path = path[:len(path)-1]
		state[r] = closed
		return false
	}
	keys := make([]Ref, 0, len(after))
	for r := range after {
		keys = append(keys, r)
	}
	slices.SortFunc(keys, func(a, b Ref) int { return strings.Compare(a.String(), b.String()) })
	for _, r := range keys {
		if visit(r) {
			return cycle
		}
	}
	return nil
}
