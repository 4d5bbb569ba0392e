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

// RateSlotGrace is how long past its slot a booking (Task.RateSlot) may still be used: a held
// task's message comes back after the slot, on SQS by up to a second (it hides a message for
// whole seconds, rounded up), and its receive and claim take some more. A booking not used by
// then has expired, and its slot goes unused. It widens what a rate lets through: the starts in
// any window of length W are at most (W + RateSlotGrace) / interval + 1 (docs/guarantees.md).
const RateSlotGrace = 2 * time.Second

// Booking is what a task's booked slot (Task.RateSlot, as stored) says of its start at a time.
type Booking int

const (
	// Unbooked is no slot, or one past RateSlotGrace: the rates decide (RateHold).
	Unbooked Booking = iota
	// BookedNow is at or past the slot, within RateSlotGrace: the task starts on its booking, and
	// no rate's record is checked or advanced.
	BookedNow
	// BookedLater is before the slot: the task is held until it, and books nothing more.
	BookedLater
)

// BookingAt is what slot, a task's booking, says of its start at now.
func BookingAt(slot *time.Time, now time.Time) Booking {
	switch {
	case slot == nil || slot.IsZero() || now.After(slot.Add(RateSlotGrace)):
		return Unbooked
	case now.Before(*slot):
		return BookedLater
	}
	return BookedNow
}

// RateBookAhead is how far ahead a held task may book its slot. A task whose slot would be later
// is held until the slot is that near, booking nothing: the tasks waiting then take the slots in
// the order their queues give them (strict priorities, keys in turn), not the order they were
// first held in, and a rate's record never runs more than this ahead of its starts, whatever the
// bookings left unused (a booked task cancelled, expired or held by a cap) or the rate changed
// (a change takes effect once the bookings made under the old one, at most this far ahead, are
// used).
const RateBookAhead = 2 * time.Second

// RateHold decides the start at now of a task without a booking under rates (the rate limits of
// Limits.Of, in its order), given when each one's record lets the next start be (next[i], zero
// if it has none). Nil: the start is allowed, and each record's next start becomes now plus its
// interval. Otherwise the start is held until h.Until, the latest of them. If book, that is the
// slot the task books (if it is within RateBookAhead; otherwise it is held until it is, and books
// nothing), in the same atomic write as each record's next start becoming the slot plus its
// interval: each record's slots are thus at least its interval apart, and each is used
// by one start at most. A task under a key's rate and the lambda's books only where the
// lambda's record has the later start: the lambda's record never jumps ahead to a key's, which
// would hold every other key's tasks too; the task is held until its key's start, booking
// nothing, and books then.
func RateHold(rates []Limit, next []time.Time, now time.Time) (h *Held, book bool) {
	latest, lambdaWide := -1, -1
	for i, l := range rates {
		if next[i].After(now) && (latest < 0 || next[i].After(next[latest])) {
			latest = i
		}
		if l.Key == "" {
			lambdaWide = i
		}
	}
	if latest < 0 {
		return nil, false
	}
	h = &Held{Limit: rates[latest].Name, Until: next[latest]}
	book = lambdaWide < 0 || !next[lambdaWide].Before(next[latest])
	if book && next[latest].Sub(now) > RateBookAhead {
		h.Until, book = next[latest].Add(-RateBookAhead), false
	}
	return h, book
}

// RateName is the limit that a hold until a booked slot names: the lambda's rate if rates (the
// rate limits of Limits.Of) has it, else the key's.
func RateName(rates []Limit) string {
	return rates[len(rates)-1].Name
}
