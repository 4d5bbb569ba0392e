package task

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits bound when a lambda's tasks may start, across every worker, function and executor at
// once: they are kept by the store, in the same atomic write as the claim that starts a run
// (docs/guarantees.md, "Limits"). A task held by a limit waits: its claim fails with a *Held
// error, no attempt is counted, and its message comes back when the limit may let it start.
type Limits struct {
	// MaxRunning caps how many of the lambda's tasks run at once; zero: no cap. Unlike the
	// lambda's Concurrency (tasks at once in one instance or executor), it counts everywhere.
	MaxRunning int
	// KeyConcurrency caps how many tasks of one key (Task.Key) run at once; zero: no cap. Tasks
	// without a key are not capped by it.
	KeyConcurrency int
	// Rate caps how often the lambda's tasks start; KeyRate how often each key's do. Zero: no
	// cap.
	Rate, KeyRate StartRate
}

// MaxLimitConcurrency bounds MaxRunning and KeyConcurrency: the store keeps the holders of a
// limit in one record, which every start of a limited task reads and writes.
const MaxLimitConcurrency = 100

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Validate names the first field that is wrong.
func (l Limits) Validate() error {
	for _, c := range []struct {
		name string
		n    int
	}{{"max running", l.MaxRunning}, {"key concurrency", l.KeyConcurrency}} {
		if c.n < 0 || c.n > MaxLimitConcurrency {
			return Errorf(ErrInvalid, "%s must be in 0..%d, got %d", c.name, MaxLimitConcurrency, c.n)
		}
	}
	for _, r := range []struct {
		name string
		r    StartRate
	}{{"rate", l.Rate}, {"key rate", l.KeyRate}} {
		if err := r.r.Validate(); err != nil {
			return Errorf(ErrInvalid, "%s: %v", r.name, err)
		}
	}
	return nil
}

// StartRate is Count starts per Per, spaced evenly: one start every Interval, with no burst.
// Zero: no cap. (A schedule's rate, by contrast, is the period of its firings.)
type StartRate struct {
	Count int
	Per   time.Duration
}

// Bounds of a StartRate: a start every MinStartInterval at the most, every MaxStartInterval at the
// least.
const (
	MinStartInterval = time.Millisecond
	MaxStartInterval = 24 * time.Hour
)

// rateUnits are the units a rate is written in.
var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// ParseStartRate reads a rate as the registry writes it: "100/s", "5/m" or "30/h". The empty string
// is no cap.
func ParseStartRate(s string) (StartRate, error) {
	if s == "" {
		return StartRate{}, nil
	}
	count, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(count)
	per, known := rateUnits[unit]
	if !ok || err != nil || !known || n < 1 {
		return StartRate{}, Errorf(ErrInvalid, "rate %q: want a count of starts per second, minute or hour, such as \"100/s\", \"5/m\" or \"30/h\"", s)
	}
	r := StartRate{Count: n, Per: per}
	if err := r.Validate(); err != nil {
		return StartRate{}, err
	}
	return r, nil
}

// String writes r as ParseStartRate reads it.
func (r StartRate) String() string {
	if r.IsZero() {
		return ""
	}
	for unit, per := range rateUnits {
		if per == r.Per {
			return fmt.Sprintf("%d/%s", r.Count, unit)
		}
	}
	return fmt.Sprintf("%d/%s", r.Count, r.Per)
}

// IsZero reports whether r caps nothing.
func (r StartRate) IsZero() bool { return r == StartRate{} }

// Interval is the time between two starts.
func (r StartRate) Interval() time.Duration { return r.Per / time.Duration(r.Count) }

// Validate checks r's interval is within bounds.
func (r StartRate) Validate() error {
	if r.IsZero() {
		return nil
	}
	if r.Count < 1 || r.Per <= 0 {
		return Errorf(ErrInvalid, "rate %d per %s: want a positive count and period", r.Count, r.Per)
	}
	if i := r.Interval(); i < MinStartInterval || i > MaxStartInterval {
		return Errorf(ErrInvalid, "rate %s: one start every %s, want between %s and %s", r, i, MinStartInterval, MaxStartInterval)
	}
	return nil
}

// ErrHeld is the error of a claim that a limit holds back (Limits). The task stays as it was, with
// no attempt counted, but for the slot a rate's hold books (Task.RateSlot): nothing else was
// written. Errors of this kind are *Held, which says until when.
var ErrHeld = errors.New("held by a limit")

// Held is the error of a claim that a limit holds back.
type Held struct {
	// Limit names the limit: "max_running", "key_concurrency", "rate" or "key_rate".
	Limit string
	// Until is when the limit may let the task start: exact for a rate, a guess for a
	// concurrency cap (when a slot frees is not known), zero if none is given.
	Until time.Time
}

func (h *Held) Error() string {
	if h.Until.IsZero() {
		return fmt.Sprintf("held by the lambda's %s", h.Limit)
	}
	return fmt.Sprintf("held by the lambda's %s until %s", h.Limit, h.Until.UTC().Format(time.RFC3339Nano))
}

func (h *Held) Unwrap() error { return ErrHeld }

// HeldUntil returns when a held claim's task may start, if err is a *Held that says so.
func HeldUntil(err error) (time.Time, bool) {
	var h *Held
	if errors.As(err, &h) && !h.Until.IsZero() {
		return h.Until, true
	}
	return time.Time{}, false
}

// LimitsSpec is Limits as the registry and the functions' ATF_LAMBDAS write them, flat in a
// lambda's entry: "max_running", "key_concurrency", "rate" and "key_rate".
type LimitsSpec struct {
	MaxRunning     int    `json:"max_running,omitempty"`
	KeyConcurrency int    `json:"key_concurrency,omitempty"`
	Rate           string `json:"rate,omitempty"`
	KeyRate        string `json:"key_rate,omitempty"`
}

// Limits reads s, validated.
func (s LimitsSpec) Limits() (Limits, error) {
	l := Limits{MaxRunning: s.MaxRunning, KeyConcurrency: s.KeyConcurrency}
	var err error
	if l.Rate, err = ParseStartRate(s.Rate); err != nil {
		return Limits{}, err
	}
	if l.KeyRate, err = ParseStartRate(s.KeyRate); err != nil {
		return Limits{}, Errorf(ErrInvalid, "key_rate: %v", err)
	}
	return l, l.Validate()
}

// Spec writes l as LimitsSpec reads it.
func (l Limits) Spec() LimitsSpec {
	return LimitsSpec{MaxRunning: l.MaxRunning, KeyConcurrency: l.KeyConcurrency, Rate: l.Rate.String(), KeyRate: l.KeyRate.String()}
}
