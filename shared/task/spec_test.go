package task

import (
	"errors"
	"testing"
	"time"
)

// TestDeadlineRange: a deadline beyond what stores can keep (int64 nanoseconds end in 2262) is
// refused rather than stored as another date.
func TestDeadlineRange(t *testing.T) {
	l, c := Lambda{Name: "l"}.WithDefaults(), Config{}.WithDefaults()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, c2 := range []struct {
		deadline time.Time
		ok       bool
	}{
		{now.Add(time.Hour), true},
		{now.Add(MaxDeadline), true},
		{now.Add(MaxDeadline + time.Second), false},
		{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), false},
	} {
		d := c2.deadline
		_, err := New(Spec{Deadline: &d}, l, now, c)
		if c2.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("deadline %s: got %v, want ok=%v or ErrInvalid", d, err, c2.ok)
		}
	}
}
