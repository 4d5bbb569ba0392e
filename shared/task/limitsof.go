package task

import (
	"slices"
	"time"
)

// Limit is one limit a start is under (Limits.Of): its name, as Held says it, the key it counts
// (empty: the whole lambda), and its cap or its rate.
type Limit struct {
	Name string
	Key  string
	Cap  int
	Rate StartRate
}

// Of returns the limits t's start is under, as a store keeps them: keyed ones first, caps before
// rates. A task without a key is under neither KeyConcurrency nor KeyRate, and one that does not
// run (a transition after the start, carrying its limits on) starts nothing: none.
func (l Limits) Of(t Task) []Limit {
	if !slices.Contains(Running, t.Status) {
		return nil
	}
	var out []Limit
	if t.Key != "" && l.KeyConcurrency > 0 {
		out = append(out, Limit{Name: "key_concurrency", Key: t.Key, Cap: l.KeyConcurrency})
	}
	if l.MaxRunning > 0 {
		out = append(out, Limit{Name: "max_running", Cap: l.MaxRunning})
	}
	if t.Key != "" && !l.KeyRate.IsZero() {
		out = append(out, Limit{Name: "key_rate", Key: t.Key, Rate: l.KeyRate})
	}
	if !l.Rate.IsZero() {
		out = append(out, Limit{Name: "rate", Rate: l.Rate})
	}
	return out
}

// StartTime is when a claim started t (StartedAt, which Claim sets): a rate counts its starts by
// it.
func (t Task) StartTime() time.Time {
	if t.StartedAt != nil {
		return *t.StartedAt
	}
	return t.UpdatedAt
}
