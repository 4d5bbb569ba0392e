package task

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
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

// TestKey: a key is checked like an id, and it is part of the request's fingerprint, so a replay
// with another key is told apart; a request without one keeps the fingerprint it always had.
func TestKey(t *testing.T) {
	l, c := Lambda{Name: "l"}.WithDefaults(), Config{}.WithDefaults()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	tk, err := New(Spec{ID: "a", Key: "tenant-1.eu:42"}, l, now, c)
	if err != nil || tk.Key != "tenant-1.eu:42" {
		t.Fatalf("key tenant-1.eu:42: %+v, %v", tk, err)
	}
	for _, bad := range []string{"has space", "-lead", "a/b", strings.Repeat("k", 129)} {
		if _, err := New(Spec{Key: bad}, l, now, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("key %q: %v, want ErrInvalid", bad, err)
		}
	}
	other, _ := New(Spec{ID: "a", Key: "tenant-2"}, l, now, c)
	bare, _ := New(Spec{ID: "a"}, l, now, c)
	if other.Spec == tk.Spec || bare.Spec == tk.Spec {
		t.Errorf("the fingerprint does not tell the keys apart")
	}
	// The fingerprint as it was before keys: stored tasks' replays still match.
	var noTime *time.Time
	b, _ := json.Marshal([]any{bare.Lambda, bare.ID, bare.Payload, noTime, bare.Priority, bare.Collection, bare.MaxAttempts, noTime, []Ref(nil)})
	if sum := sha256.Sum256(b); bare.Spec != hex.EncodeToString(sum[:]) {
		t.Errorf("a task without a key has another fingerprint than before keys")
	}
}
