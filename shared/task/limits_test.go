package task

import (
	"errors"
	"testing"
	"time"
)

func TestParseStartRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want StartRate
		ok   bool
	}{
		{"", StartRate{}, true},
		{"100/s", StartRate{100, time.Second}, true},
		{"5/m", StartRate{5, time.Minute}, true},
		{"30/h", StartRate{30, time.Hour}, true},
		{"1000/s", StartRate{1000, time.Second}, true},
		{"1001/s", StartRate{}, false}, // a start every 0.999 ms: under MinStartInterval
		{"0/s", StartRate{}, false},
		{"-1/s", StartRate{}, false},
		{"5", StartRate{}, false},
		{"5/d", StartRate{}, false},
		{"5/S", StartRate{}, false},
		{"five/s", StartRate{}, false},
	} {
		got, err := ParseStartRate(c.in)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("ParseStartRate(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseStartRate(%q): %v, want ErrInvalid", c.in, err)
		}
		if err == nil && got.String() != c.in {
			t.Errorf("ParseStartRate(%q).String() = %q, want it back", c.in, got.String())
		}
	}
	if r := (StartRate{5, time.Second}); r.Interval() != 200*time.Millisecond {
		t.Errorf("5/s: a start every %s, want 200ms", r.Interval())
	}
}

func TestLimitsSpec(t *testing.T) {
	l, err := LimitsSpec{MaxRunning: 10, KeyConcurrency: 1, Rate: "100/s", KeyRate: "5/s"}.Limits()
	want := Limits{MaxRunning: 10, KeyConcurrency: 1, Rate: StartRate{100, time.Second}, KeyRate: StartRate{5, time.Second}}
	if err != nil || l != want {
		t.Fatalf("Limits() = %+v, %v; want %+v", l, err, want)
	}
	if back, _ := l.Spec().Limits(); back != l {
		t.Errorf("Spec() does not read back: %+v", l.Spec())
	}
	for _, bad := range []LimitsSpec{
		{MaxRunning: -1}, {KeyConcurrency: MaxLimitConcurrency + 1}, {Rate: "fast"}, {KeyRate: "0/s"},
	} {
		if _, err := bad.Limits(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if (Limits{}).IsZero() != true || want.IsZero() {
		t.Error("IsZero")
	}
}

func TestHeld(t *testing.T) {
	until := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var err error = &Held{Limit: "rate", Until: until}
	if !errors.Is(err, ErrHeld) {
		t.Fatal("a *Held is not ErrHeld")
	}
	if got, ok := HeldUntil(err); !ok || !got.Equal(until) {
		t.Errorf("HeldUntil = %v, %v", got, ok)
	}
	if _, ok := HeldUntil(&Held{Limit: "key_concurrency"}); ok {
		t.Error("a cap's hold gives no time")
	}
	if _, ok := HeldUntil(ErrConflict); ok {
		t.Error("HeldUntil of another error")
	}
}

// TestBookingAt: a booking is used from its slot to RateSlotGrace past it; before, the task is
// held until it; after, or without one, the rates decide.
func TestBookingAt(t *testing.T) {
	slot := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		slot *time.Time
		now  time.Time
		want Booking
	}{
		{nil, slot, Unbooked},
		{&time.Time{}, slot, Unbooked},
		{&slot, slot.Add(-time.Nanosecond), BookedLater},
		{&slot, slot, BookedNow},
		{&slot, slot.Add(RateSlotGrace), BookedNow},
		{&slot, slot.Add(RateSlotGrace + time.Nanosecond), Unbooked},
	} {
		if got := BookingAt(c.slot, c.now); got != c.want {
			t.Errorf("BookingAt(%v, slot%+v) = %v, want %v", c.slot, c.now.Sub(slot), got, c.want)
		}
	}
}

// TestRateHold: a start is held until the latest next start of its rates, and books it unless a
// key's is later than the lambda's, or it is more than RateBookAhead ahead: then it is held until
// it is that near, booking nothing.
func TestRateHold(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	key := Limit{Name: "key_rate", Key: "k", Rate: StartRate{Count: 1, Per: time.Minute}}
	lambda := Limit{Name: "rate", Rate: StartRate{Count: 10, Per: time.Second}}
	for _, c := range []struct {
		name   string
		rates  []Limit
		next   []time.Time
		held   string
		until  time.Time
		booked bool
	}{
		{"none recorded", []Limit{lambda}, []time.Time{{}}, "", time.Time{}, false},
		{"due now", []Limit{lambda}, []time.Time{now}, "", time.Time{}, false},
		{"lambda's ahead", []Limit{lambda}, []time.Time{now.Add(time.Second)}, "rate", now.Add(time.Second), true},
		{"key's ahead, alone", []Limit{key}, []time.Time{now.Add(time.Second)}, "key_rate", now.Add(time.Second), true},
		{"key's far ahead, alone", []Limit{key}, []time.Time{now.Add(time.Minute)}, "key_rate", now.Add(time.Minute - RateBookAhead), false},
		{"lambda's just within reach", []Limit{lambda}, []time.Time{now.Add(RateBookAhead)}, "rate", now.Add(RateBookAhead), true},
		{"lambda's just out of reach", []Limit{lambda}, []time.Time{now.Add(RateBookAhead + time.Nanosecond)}, "rate", now.Add(time.Nanosecond), false},
		{"both, the lambda's later", []Limit{key, lambda}, []time.Time{now.Add(time.Second), now.Add(2 * time.Second)}, "rate", now.Add(2 * time.Second), true},
		{"both, the key's later", []Limit{key, lambda}, []time.Time{now.Add(time.Minute), now.Add(time.Second)}, "key_rate", now.Add(time.Minute), false},
		{"both, the key's ahead, the lambda's due", []Limit{key, lambda}, []time.Time{now.Add(time.Minute), {}}, "key_rate", now.Add(time.Minute), false},
		{"both, the key's due", []Limit{key, lambda}, []time.Time{now, now.Add(time.Second)}, "rate", now.Add(time.Second), true},
	} {
		h, book := RateHold(c.rates, c.next, now)
		switch {
		case c.held == "" && h != nil:
			t.Errorf("%s: held by %v; want a start", c.name, h)
		case c.held != "" && (h == nil || h.Limit != c.held || !h.Until.Equal(c.until) || book != c.booked):
			t.Errorf("%s: held by %v, booked %v; want held by the %s until %v, booked %v", c.name, h, book, c.held, c.until, c.booked)
		}
	}
}

// TestRateSlotKeptWhileEnqueued: a booked slot (RateSlot) stays while its task stays enqueued (a
// resend, an unsent message's retry, an expiry at a restart), so its message, sent again, starts on
// it; every transition out of enqueued clears it, so no later claim of the task, in another life,
// can start on a slot booked for this one.
func TestRateSlotKeptWhileEnqueued(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	c := Config{}.WithDefaults()
	l := Lambda{Name: "rated"}.WithDefaults()
	tk, err := New(Spec{ID: "t"}, l, now, c)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err = Enqueue(tk, now, c); err != nil {
		t.Fatal(err)
	}
	slot := now.Add(time.Second)
	tk.RateSlot = &slot
	later := now.Add(time.Hour)
	for _, step := range []struct {
		name string
		fn   func(Task) (Task, error)
		kept bool
	}{
		{"resend", func(t Task) (Task, error) { return Enqueue(t, later, c) }, true},
		{"unsent", func(t Task) (Task, error) { return Unsent(t, later, c) }, true},
		{"claim", func(t Task) (Task, error) { return Claim(t, "lease", later, c) }, false},
		{"hold", func(t Task) (Task, error) { return Hold(t, later) }, false},
		{"cancel", func(t Task) (Task, error) { return Cancel(t, later) }, false},
		{"drop", func(t Task) (Task, error) { return Drop(t, later) }, false},
		{"expire", func(t Task) (Task, error) { return Expire(t, later) }, true}, // still enqueued
	} {
		next, err := step.fn(tk)
		if err != nil {
			t.Errorf("%s: %v", step.name, err)
			continue
		}
		if kept := next.RateSlot != nil && next.RateSlot.Equal(slot); kept != step.kept {
			t.Errorf("%s: the slot is %v after it, want kept %v", step.name, next.RateSlot, step.kept)
		}
	}
}
