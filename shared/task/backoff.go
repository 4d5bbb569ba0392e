package task

import (
	"fmt"
	"time"
)

// Backoff is the delay before retry number attempt (1 for the first retry): base × 2^(attempt-1),
// capped at max, with "equal jitter": half the delay is fixed, and jitter (in [0,1)) scales the
// other half, so retries of tasks that failed together spread out but never retry at once.
func Backoff(attempt int, base, max time.Duration, jitter float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(jitter*float64(d/2))
}

// Defaults of a BackoffPolicy's fields that a lambda leaves out: the retries of Config's
// defaults.
const (
	DefaultBackoffFactor = 2.0
	DefaultBackoffJitter = 0.5 // equal jitter
)

// Bounds of a BackoffPolicy.
const (
	// MaxBackoffFactor bounds the growth of the delays: past it, the second retry would already
	// wait near the cap.
	MaxBackoffFactor = 10.0
	// MaxBackoff bounds a policy's cap, as far ahead as a task may be scheduled.
	MaxBackoff = MaxDelay
)

// BackoffPolicy shapes the delays between a lambda's retries (Lambda.Backoff): the first retry
// waits Base, each next one Factor times the one before, at most Max; Jitter is the share of each
// delay that is random (0: none; 0.5, the default, "equal jitter"; 1: anywhere from zero).
type BackoffPolicy struct {
	Base   time.Duration
	Factor float64
	Max    time.Duration
	Jitter float64
}

// Delay is the delay before retry number retry (1 for the first retry); random is a random number
// in [0,1).
func (b BackoffPolicy) Delay(retry int, random float64) time.Duration {
	d := b.Base
	for i := 1; i < retry && d < b.Max; i++ {
		d = time.Duration(float64(d) * b.Factor) // within Max × MaxBackoffFactor: no overflow
	}
	d = min(d, b.Max)
	spread := time.Duration(b.Jitter * float64(d))
	return d - spread + time.Duration(random*float64(spread))
}

// Validate names the first field that is wrong.
func (b BackoffPolicy) Validate() error {
	switch {
	case b.Base <= 0:
		return fmt.Errorf("backoff base must be positive, got %s", b.Base)
	case b.Max < b.Base || b.Max > MaxBackoff:
		return fmt.Errorf("backoff max must be within base (%s) and %s, got %s", b.Base, MaxBackoff, b.Max)
	case !(b.Factor >= 1 && b.Factor <= MaxBackoffFactor): // NaN too
		return fmt.Errorf("backoff factor must be in 1..%g, got %g", MaxBackoffFactor, b.Factor)
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		return fmt.Errorf("backoff jitter must be in 0..1 (the random share of each delay), got %g", b.Jitter)
	}
	return nil
}

// retryDelay is the backoff before retry number retry: c.Backoff's if set (its lambda's), else
// BackoffBase and BackoffMax with the default factor and jitter.
func (c Config) retryDelay(retry int, random float64) time.Duration {
	if c.Backoff != nil {
		return c.Backoff.Delay(retry, random)
	}
	return Backoff(retry, c.BackoffBase, c.BackoffMax, random)
}

// BackoffSpec is a BackoffPolicy as the lambda registry and ATF_LAMBDAS write it: durations as
// Go durations ("1s", "10m"), and any field left out at its default (DefaultBackoffBase,
// DefaultBackoffFactor, DefaultBackoffMax or the base if higher, DefaultBackoffJitter).
type BackoffSpec struct {
	Base   string   `json:"base,omitempty"`
	Factor *float64 `json:"factor,omitempty"`
	Max    string   `json:"max,omitempty"`
	Jitter *float64 `json:"jitter,omitempty"`
}

// Policy returns the policy s describes, validated; errors name the field.
func (s BackoffSpec) Policy() (BackoffPolicy, error) {
	p := BackoffPolicy{Base: DefaultBackoffBase, Factor: DefaultBackoffFactor, Jitter: DefaultBackoffJitter}
	for _, f := range []struct {
		name, v string
		d       *time.Duration
	}{{"base", s.Base, &p.Base}, {"max", s.Max, &p.Max}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil {
			return BackoffPolicy{}, fmt.Errorf("backoff %s %q: want a Go duration, such as \"30s\"", f.name, f.v)
		}
		*f.d = d
	}
	if s.Max == "" {
		p.Max = max(DefaultBackoffMax, p.Base)
	}
	if s.Factor != nil {
		p.Factor = *s.Factor
	}
	if s.Jitter != nil {
		p.Jitter = *s.Jitter
	}
	return p, p.Validate()
}

// Spec returns p as a BackoffSpec, whole.
func (p BackoffPolicy) Spec() BackoffSpec {
	factor, jitter := p.Factor, p.Jitter
	return BackoffSpec{Base: p.Base.String(), Factor: &factor, Max: p.Max.String(), Jitter: &jitter}
}
