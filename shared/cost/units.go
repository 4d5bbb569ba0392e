package cost

import (
	"slices"

	"github.com/openatf/atf/shared/task"
)

// Units are DynamoDB capacity units: write request units (a write of up to 1 KB) and read
// request units (a strongly consistent read of up to 4 KB).
type Units struct {
	Write float64 `json:"write_units"`
	Read  float64 `json:"read_units"`
}

// Plus returns u + v.
func (u Units) Plus(v Units) Units { return Units{Write: u.Write + v.Write, Read: u.Read + v.Read} }

// Times returns u times n.
func (u Units) Times(n float64) Units { return Units{Write: u.Write * n, Read: u.Read * n} }

// USD prices u on demand.
func (u Units) USD() float64 {
	return u.Write*DynamoDBWritePerMillion/1e6 + u.Read*DynamoDBReadPerMillion/1e6
}

// What one transition's writes touch on the DynamoDB store (dynamostore), in units, for a task
// whose item stays under 1 KB (a payload over 400 bytes has an item of its own): the model of
// docs/capacity.md, "Writes per task". TestWritesPerTask (shared/store/dynamostore) fails when
// the store's measured units part from it, so a change of the write path changes these with it.
const (
	TaskItemWrite    = 1 // the task item, rewritten by every transition
	CounterWrite     = 1 // the lambda shard's counter item, after every status change
	DueEntryWrite    = 1 // an entry of the due index added or removed; a move is both
	ListEntryWrite   = 1 // the task's list index entry, written when it is created only
	FailedEntryWrite = 1 // its entry in the failed index, while it is dead or fatal_failure
	AttemptItemWrite = 1 // the history item of an attempt that did not succeed (an error under 800 bytes)
	StateRead        = 1 // the strongly consistent read of the task before a conditional write
)

// TransitionUnits is what the DynamoDB store spends to move one task from status from to status
// to; from is empty for a task created. A waiting task keeps a due entry, so a move between two
// waiting statuses moves the entry. Two statuses are taken as AWS's workers leave them, with no
// entry: `enqueued` as the API creates it, its message sent first (docs/guarantees.md, "Send,
// then write"), and a running one (claimed, processing), whose hidden message times its lease
// ("The queue as the lease timer"). A task enqueued by a sweep or a retry sent ahead has an entry,
// which its claim removes: 1 WRU more than this says; a lease the store times (a claim without
// its message, or one given back to the store's timer) costs 1 WRU more at its claim and at its
// end, and 2 at each heartbeat. Heartbeats, sweeps' reads, lists and gates are not transitions,
// and a batch's transaction (about 0.04 WRU a task) is left out.
func TransitionUnits(from, to task.Status) Units {
	u := Units{Write: TaskItemWrite + CounterWrite}
	due := func(s task.Status) bool { return s != "" && !s.Terminal() && !slices.Contains(task.Running, s) }
	failed := func(s task.Status) bool { return s == task.StatusDead || s == task.StatusFatalFailure }
	if from == "" {
		u.Write += ListEntryWrite
		if due(to) && to != task.StatusEnqueued {
			u.Write += DueEntryWrite
		}
		return u // a create writes without reading
	}
	switch {
	case from == task.StatusEnqueued: // sent first: no entry to move or remove
		if due(to) {
			u.Write += DueEntryWrite
		}
	case due(from) && due(to):
		u.Write += 2 * DueEntryWrite
	case due(from) != due(to):
		u.Write += DueEntryWrite
	}
	if failed(from) != failed(to) {
		u.Write += FailedEntryWrite
	}
	if (from == task.StatusProcessing || from == task.StatusClaimed) && to != task.StatusSuccess {
		u.Write += AttemptItemWrite
	}
	u.Read = StateRead
	return u
}
