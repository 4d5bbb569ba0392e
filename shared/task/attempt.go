package task

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Outcome says how an attempt ended. Its words are those a worker reports (success, retriable,
// fatal, cancelled, snoozed), and timeout for an attempt whose worker went silent (its lease was
// lost).
type Outcome string

// The outcomes of an attempt.
const (
	OutcomeSuccess   Outcome = "success"
	OutcomeRetriable Outcome = "retriable"
	OutcomeFatal     Outcome = "fatal"
	OutcomeTimeout   Outcome = "timeout"
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSnoozed is a run whose handler asked to run again later without counting an attempt
	// (Snooze).
	OutcomeSnoozed Outcome = "snoozed"
)

// Attempt is one run of a task, as its history keeps it.
type Attempt struct {
	// Number counts the task's runs over all its lives, from 1, snoozed ones included (Snooze
	// gives the attempt back, not the number): a redrive sets Task.Attempts back to zero, but
	// its next attempt goes on from the last number.
	Number    int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	Outcome   Outcome   `json:"outcome"`
	Error     string    `json:"error"` // as the task kept it: at most MaxErrorBytes
	// Worker names who ran it: the executor's name, as its claim gave it.
	Worker string `json:"worker"`
	// Log is the tail of what its handler wrote to standard error, at most MaxLogBytes: kept by
	// the embedded store of atf dev. DynamoDB keeps none (its logs are in CloudWatch).
	Log string `json:"log"`
	// LogLocation names where its logs are in CloudWatch Logs, if its worker said (a worker
	// function does).
	LogLocation *LogLocation `json:"log_location,omitempty"`
}

// LogLocation names where a worker's logs are in CloudWatch Logs: a log group and stream, and
// the Lambda invocation (its request id) that ran the attempt, if one did.
type LogLocation struct {
	Group     string `json:"log_group"`
	Stream    string `json:"log_stream"`
	RequestID string `json:"request_id,omitempty"`
}

// MaxLogName bounds each field of a LogLocation a claim records: CloudWatch's log group and
// stream names are at most 512 characters, a request id is 36.
const MaxLogName = 512

// Bounded is l with each field cut to MaxLogName bytes, or nil if l is nil or names no group.
func (l *LogLocation) Bounded() *LogLocation {
	if l == nil || l.Group == "" {
		return nil
	}
	cut := func(s string) string {
		if len(s) > MaxLogName {
			s = strings.ToValidUTF8(s[:MaxLogName], "")
		}
		return s
	}
	return &LogLocation{Group: cut(l.Group), Stream: cut(l.Stream), RequestID: cut(l.RequestID)}
}

// Duration is how long the attempt ran, from its claim to its end; zero if its start is not
// known (an attempt claimed by a version before histories).
func (a Attempt) Duration() time.Duration {
	if a.StartedAt.IsZero() {
		return 0
	}
	return a.EndedAt.Sub(a.StartedAt)
}

// MarshalJSON adds duration_ms, the attempt's Duration in milliseconds.
func (a Attempt) MarshalJSON() ([]byte, error) {
	type plain Attempt
	return json.Marshal(struct {
		plain
		DurationMS int64 `json:"duration_ms"`
	}{plain(a), a.Duration().Milliseconds()})
}

// MaxLogBytes bounds an attempt's log: its last MaxLogBytes are kept.
const MaxLogBytes = 16 << 10

// TailLog returns the last MaxLogBytes of log, cut at a UTF-8 character boundary.
func TailLog(log string) string {
	if len(log) <= MaxLogBytes {
		return log
	}
	start := len(log) - MaxLogBytes
	for start < len(log) && !utf8.RuneStart(log[start]) {
		start++
	}
	return log[start:]
}

// Logged is t with log (its tail: TailLog) as the log of the attempt its transition ended, if it
// ended one.
func (t Task) Logged(log string) Task {
	if t.Ended == nil || log == "" {
		return t
	}
	a := *t.Ended
	a.Log = TailLog(log)
	t.Ended = &a
	return t
}

// MaxHistory is how many attempts a task's history keeps: the latest ones. Older ones are
// counted (History.Dropped), not kept.
const MaxHistory = 20

// History is what a store keeps of a task's attempts.
type History struct {
	// Attempts are the latest ended attempts, at most MaxHistory, oldest first. A running
	// attempt is not among them until it ends.
	Attempts []Attempt `json:"attempts"`
	// Dropped counts the attempts before the oldest one kept.
	Dropped int `json:"attempts_dropped"`
}

// HistoryStore keeps the latest attempts of every task. Update records the attempt a transition
// ended (Task.Ended) with the transition.
type HistoryStore interface {
	// Attempts returns a task's history, or ErrNotFound if there is no such task.
	Attempts(ctx context.Context, lambda, id string) (History, error)
}

// NewHistory is the history of the attempts kept, in any order, at most MaxHistory of them
// (the latest), oldest first, with the count of those before them.
func NewHistory(kept []Attempt) History {
	h := History{Attempts: slices.Clone(kept)}
	if h.Attempts == nil {
		h.Attempts = []Attempt{} // answered as [], not null
	}
	slices.SortFunc(h.Attempts, func(a, b Attempt) int { return cmp.Compare(a.Number, b.Number) })
	if len(h.Attempts) > MaxHistory {
		h.Attempts = h.Attempts[len(h.Attempts)-MaxHistory:]
	}
	if len(h.Attempts) > 0 {
		h.Dropped = max(h.Attempts[0].Number-1, 0)
	}
	return h
}

// LastAttempt is the attempt a task's own fields tell, when the task ended with it (a succeeded
// task: nothing runs it again), and false otherwise. A store that leaves a success out of its
// history records (to spare a write for every task that succeeds) reads it from here.
func (t Task) LastAttempt() (Attempt, bool) {
	if t.Status != StatusSuccess || t.StartedAt == nil || t.EndedAt == nil {
		return Attempt{}, false
	}
	return Attempt{Number: t.AttemptSeq, StartedAt: *t.StartedAt, EndedAt: *t.EndedAt, Outcome: OutcomeSuccess, Worker: t.Worker, LogLocation: t.LogLocation}, true
}

// endAttempt records on t, as its transition's Ended, that its running attempt ended now with
// outcome o and the error t keeps.
func (t Task) endAttempt(o Outcome, now time.Time) Task {
	a := Attempt{Number: t.AttemptSeq, EndedAt: now, Outcome: o, Error: t.Error, Worker: t.Worker, LogLocation: t.LogLocation}
	if t.StartedAt != nil {
		a.StartedAt = *t.StartedAt
	}
	t.EndedAt, t.Ended = at(now), &a
	return t
}
