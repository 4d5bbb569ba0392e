package modeltest

import (
	"fmt"
	"time"
)

// An execution is one lease of one task: the claim that issued the lease, and every heartbeat,
// result and release carrying it that the status controller accepted (wrote to the store).
//
// Accepted calls are numbered in the order the store took them: the model makes one call at a
// time (a race lets one call run whole between another's read and its write, and the number is
// taken when each returns, in the order of their writes). An execution's accepted interval runs
// from its claim's number to its last accepted call's number. The guarantees, as the history
// checks them:
//
//   - No overlapping accepted executions: two intervals of one task never overlap. Once a claim
//     of a later lease is accepted, no call with an earlier lease is ever accepted again.
//   - Lease tokens never go backwards: every claim issues a token never seen before, and it is
//     accepted only once the previous execution is dead: its result or release was accepted, or
//     the store was seen to have taken the task back (a timeout). The store never holds a lease
//     other than the last one issued (checked in machine.look).
//   - On the clock: when an execution dies because it went silent, the next claim comes more than
//     task.MaxMissedHeartbeats heartbeat intervals after its last accepted call, so its executor,
//     which stops its handler after that many failed heartbeats, has stopped before another one
//     starts. The exception is a restart of the whole process: its workers died with it, and
//     consumer.Recover re-runs their tasks at once on purpose.
type execution struct {
	task   string
	n      int // 1 for the task's first lease, 2 for the next, ...
	lease  string
	worker string

	claimSeq, lastSeq int       // numbers of the claim and of the last accepted call
	claimAt, lastAt   time.Time // the same on the fake clock

	endedBy  string // empty while the execution may hold the task; else what ended it
	orphaned bool   // its worker died in a restart of the whole process
}

// What ended an execution besides an accepted result or release.
const takenBack = "taken back by the store"

func (e *execution) String() string { return fmt.Sprintf("#%d (%s)", e.n, e.worker) }

// history records every accepted claim and call, and checks the guarantees above.
type history struct {
	seq     int
	execs   map[string][]*execution // by task id, in claim order
	byLease map[string]*execution
	silence time.Duration // how long a silent executor may still run: MaxMissedHeartbeats × interval
	problem func(format string, args ...any)
}

func newHistory(silence time.Duration, problem func(string, ...any)) *history {
	return &history{execs: map[string][]*execution{}, byLease: map[string]*execution{}, silence: silence, problem: problem}
}

// latest returns the last execution of a task, or nil.
func (h *history) latest(id string) *execution {
	es := h.execs[id]
	if len(es) == 0 {
		return nil
	}
	return es[len(es)-1]
}

// claimed records an accepted claim.
func (h *history) claimed(id, lease, worker string, at time.Time) *execution {
	h.seq++
	prev := h.latest(id)
	e := &execution{task: id, n: len(h.execs[id]) + 1, lease: lease, worker: worker,
		claimSeq: h.seq, lastSeq: h.seq, claimAt: at, lastAt: at}
	if h.byLease[lease] != nil {
		h.problem("lease tokens went backwards: task %s was claimed by %s with a token issued before", id, e)
	}
	switch {
	case prev == nil:
	case prev.endedBy == "":
		h.problem("lease tokens went backwards: task %s was claimed by execution %s while execution %s still held it", id, e, prev)
	case prev.endedBy == takenBack && !prev.orphaned && at.Sub(prev.lastAt) <= h.silence:
		h.problem("a task was claimed again while its silent executor may still run: task %s: execution %s was claimed %s after "+
			"the last accepted call of execution %s, whose executor may run for %s after it", id, e, at.Sub(prev.lastAt), prev, h.silence)
	}
	h.execs[id] = append(h.execs[id], e)
	h.byLease[lease] = e
	return e
}

// accepted records an accepted heartbeat, result or release. ends is true for a result or a
// release: the worker says it is done with the task.
func (h *history) accepted(id, lease, what string, at time.Time, ends bool) {
	h.seq++
	e := h.byLease[lease]
	if e == nil || e.task != id {
		h.problem("a call was accepted with a lease no claim issued: task %s, a %s", id, what)
		return
	}
	if e == h.latest(id) && e.endedBy != "" {
		// An earlier execution's call is reported by overlaps.
		h.problem("a call was accepted after its execution ended: task %s accepted a %s of execution %s after it ended (%s)", id, what, e, e.endedBy)
	}
	e.lastSeq, e.lastAt = h.seq, at
	if ends && e.endedBy == "" {
		e.endedBy = what
	}
}

// seen records that the store was read with the task in status running (claimed or processing)
// under lease, or not running: the last execution dies when the store no longer holds its lease.
func (h *history) seen(id string, running bool, lease string) {
	if e := h.latest(id); e != nil && e.endedBy == "" && (!running || lease != e.lease) {
		e.endedBy = takenBack
	}
}

// orphan marks the executions alive now as run by workers that died with the whole process.
func (h *history) orphan(ids []string) {
	for _, id := range ids {
		if e := h.latest(id); e != nil && e.endedBy == "" {
			e.orphaned = true
		}
	}
}

// overlaps checks that the accepted intervals of each task's executions are disjoint.
func (h *history) overlaps(ids []string) {
	for _, id := range ids {
		es := h.execs[id]
		for i := 1; i < len(es); i++ {
			if a, b := es[i-1], es[i]; a.lastSeq > b.claimSeq {
				h.problem("overlapping accepted executions: task %s: execution %s had a call accepted at #%d, "+
					"after execution %s was claimed at #%d", id, a, a.lastSeq, b, b.claimSeq)
			}
		}
	}
}
