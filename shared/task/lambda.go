package task

import (
	"fmt"
	"slices"
	"time"
)

// DefaultPriorities are a lambda's priority levels unless it names its own, highest first.
var DefaultPriorities = []string{"high", "normal", "low"}

// DefaultPriority is the priority of a task that names none: the middle level.
func (l Lambda) DefaultPriority() string { return l.Priorities[len(l.Priorities)/2] }

// Defaults of Lambda.
const (
	DefaultConcurrency    = 4
	DefaultHandlerTimeout = 5 * time.Minute
)

// Lambda is a named callback and the rules for running its tasks.
type Lambda struct {
	Name string
	// Priorities are the levels, highest first.
	Priorities []string
	// Concurrency is how many of its tasks may run at once on one controller.
	Concurrency int
	// Timeout bounds one run of the handler.
	Timeout time.Duration
	// MaxAttempts is the default for tasks that don't set their own; zero means Config.MaxAttempts.
	MaxAttempts int
	// MaxEnqueued bounds how many of its tasks are enqueued (in its queues) at once; the consumer
	// leaves further due tasks waiting in the store. Zero means DefaultMaxEnqueued. It is a soft
	// bound, read from the store's kept counts (docs/guarantees.md).
	MaxEnqueued int
	// Backoff, if set, shapes the delays between its retries; nil means Config's (BackoffBase,
	// BackoffMax, doubling, equal jitter). See Config.
	Backoff *BackoffPolicy
	// Limits bound when its tasks may start, counted across every worker (see Limits).
	Limits Limits
}

// Config returns c as it applies to the lambda's tasks: with the lambda's backoff, if it sets one.
func (l Lambda) Config(c Config) Config {
	if l.Backoff != nil {
		c.Backoff = l.Backoff
	}
	return c
}

// DefaultMaxEnqueued is a lambda's MaxEnqueued unless it sets one: twice the enqueue quota and
// its concurrency. A pass is cut by it only while more than a quota plus twice the concurrency
// are still queued, more than the next pass could add, so a worker pool cannot run dry before
// that pass (docs/capacity.md).
func (l Lambda) DefaultMaxEnqueued(c Config) int { return 2 * (c.EnqueueQuota + l.Concurrency) }

// EnqueuedCap returns MaxEnqueued, or its default.
func (l Lambda) EnqueuedCap(c Config) int {
	if l.MaxEnqueued > 0 {
		return l.MaxEnqueued
	}
	return l.DefaultMaxEnqueued(c)
}

// WithDefaults returns l with every zero field set to its default.
func (l Lambda) WithDefaults() Lambda {
	if len(l.Priorities) == 0 {
		l.Priorities = slices.Clone(DefaultPriorities)
	}
	if l.Concurrency == 0 {
		l.Concurrency = DefaultConcurrency
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultHandlerTimeout
	}
	return l
}

// Validate names the first field that is wrong.
func (l Lambda) Validate() error {
	if err := ValidateName("lambda name", l.Name); err != nil {
		return err
	}
	if len(l.Priorities) == 0 {
		return Errorf(ErrInvalid, "lambda %s: needs at least one priority", l.Name)
	}
	for i, p := range l.Priorities {
		if err := ValidateName("priority", p); err != nil {
			return fmt.Errorf("lambda %s: %w", l.Name, err)
		}
		if slices.Contains(l.Priorities[:i], p) {
			return Errorf(ErrInvalid, "lambda %s: priority %q is listed twice", l.Name, p)
		}
	}
	if l.Concurrency < 1 {
		return Errorf(ErrInvalid, "lambda %s: concurrency must be at least 1, got %d", l.Name, l.Concurrency)
	}
	if l.Timeout <= 0 {
		return Errorf(ErrInvalid, "lambda %s: timeout must be positive, got %s", l.Name, l.Timeout)
	}
	if l.MaxEnqueued != 0 && l.MaxEnqueued < l.Concurrency { // slots would stay idle for want of messages
		return Errorf(ErrInvalid, "lambda %s: max enqueued must be zero (the default) or at least the concurrency %d, got %d", l.Name, l.Concurrency, l.MaxEnqueued)
	}
	if l.MaxAttempts < 0 || l.MaxAttempts > MaxAttemptsLimit {
		return Errorf(ErrInvalid, "lambda %s: max attempts must be in 0..%d, got %d", l.Name, MaxAttemptsLimit, l.MaxAttempts)
	}
	if l.Backoff != nil {
		if err := l.Backoff.Validate(); err != nil {
			return Errorf(ErrInvalid, "lambda %s: %v", l.Name, err)
		}
	}
	if err := l.Limits.Validate(); err != nil {
		return fmt.Errorf("lambda %s: %w", l.Name, err)
	}
	return nil
}

// HasPriority reports whether p is one of the lambda's levels.
func (l Lambda) HasPriority(p string) bool { return slices.Contains(l.Priorities, p) }

// LambdaInfo describes a lambda, its gates that are not open, and its task counts by status:
// what the frontend lists and the API answers to GET /v1/lambdas, and what the client reads.
// Like Task and Gate it is domain data, so both ends share it without importing each other.
type LambdaInfo struct {
	Name       string         `json:"name"`
	Priorities []string       `json:"priorities"`
	Gates      []Gate         `json:"gates"`
	Counts     map[Status]int `json:"counts"`
}
