package task

import (
	"fmt"
	"time"
)

// Defaults of Config. Each is chosen for production on AWS; `atf dev` shortens the poll interval.
const (
	// DefaultEnqueueTimeout is how long a task may sit in its queue unclaimed before the consumer
	// enqueues it again. It covers a lost message; a backlog longer than this only costs a
	// duplicate message, which the claim discards.
	DefaultEnqueueTimeout = 10 * time.Minute
	// DefaultClaimTimeout was how long a claimed task could wait for its first heartbeat.
	//
	// Deprecated: a claim starts its task (see Claim); Config.ClaimTimeout is unused.
	DefaultClaimTimeout = 30 * time.Second
	// DefaultHeartbeatInterval is how often an executor reports that a task is still running.
	DefaultHeartbeatInterval = 5 * time.Second
	// DefaultHeartbeatTimeout is how long after its last heartbeat a running task is considered
	// lost. Less the lease margin, it must exceed MaxMissedHeartbeats × HeartbeatInterval: a
	// handler gets that many heartbeats before its executor must stop it.
	DefaultHeartbeatTimeout = 30 * time.Second
	// leaseMarginShare: unless set, the lease margin is this share of the heartbeat timeout
	// (5 s of the default 30 s).
	leaseMarginShare = 6
	// DefaultMaxAttempts is how many times a task runs before it is dead.
	DefaultMaxAttempts = 5
	// DefaultPollInterval is how often the consumer sweeps for due tasks.
	DefaultPollInterval = time.Second
	// DefaultPayloadLimit bounds a task's payload and its result, in bytes. DynamoDB items are
	// at most 400 KB and SQS messages carry only the task id, so 256 KiB leaves room for the rest.
	DefaultPayloadLimit = 256 << 10
	// DefaultBackoffBase and DefaultBackoffMax shape retry delays: base × 2^(attempt-1), capped.
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 10 * time.Minute
	// DefaultEnqueueQuota is how many tasks of one lambda the consumer enqueues per sweep, so a
	// flood on one lambda cannot delay another lambda's due tasks.
	DefaultEnqueueQuota = 500
)

// MaxMissedHeartbeats is how many heartbeats in a row may fail before an executor stops its
// handler: from then on it can no longer prove that it owns the task.
const MaxMissedHeartbeats = 3

// MaxAttemptsLimit caps max_attempts in a schedule request.
const MaxAttemptsLimit = 100

// Config holds the timing rules of the task lifecycle. The zero value of a field means its
// default; call WithDefaults, then Validate.
type Config struct {
	EnqueueTimeout time.Duration
	// ClaimTimeout bounded a claimed task that never started.
	//
	// Deprecated: unused, and not checked, since a claim starts its task with a heartbeat
	// timeout (see Claim); kept so that configurations that set it still build.
	ClaimTimeout      time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// LeaseMargin is how long before its lease can run out an executor has stopped its handler:
	// the handler is stopped at the start of its last successful heartbeat + HeartbeatTimeout −
	// LeaseMargin, and must be gone within half the margin; the other half covers the clock
	// skew between the status controller and the consumer (docs/guarantees.md). Zero means
	// HeartbeatTimeout / 6.
	LeaseMargin  time.Duration
	MaxAttempts  int
	PollInterval time.Duration
	PayloadLimit int
	BackoffBase  time.Duration
	BackoffMax   time.Duration
	// Backoff, if set, replaces BackoffBase and BackoffMax: the backoff of the lambda whose tasks
	// the config is applied to (Lambda.Config sets it, from Lambda.Backoff).
	Backoff      *BackoffPolicy
	EnqueueQuota int
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.EnqueueTimeout, DefaultEnqueueTimeout)
	set(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	set(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	set(&c.LeaseMargin, c.HeartbeatTimeout/leaseMarginShare)
	set(&c.PollInterval, DefaultPollInterval)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.PayloadLimit == 0 {
		c.PayloadLimit = DefaultPayloadLimit
	}
	if c.EnqueueQuota == 0 {
		c.EnqueueQuota = DefaultEnqueueQuota
	}
	return c
}

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"EnqueueTimeout", c.EnqueueTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"HeartbeatTimeout", c.HeartbeatTimeout}, {"LeaseMargin", c.LeaseMargin},
		{"PollInterval", c.PollInterval}, {"BackoffBase", c.BackoffBase}, {"BackoffMax", c.BackoffMax},
	} {
		if d.v <= 0 {
			return fmt.Errorf("task config: %s must be positive, got %s", d.name, d.v)
		}
	}
	if c.HeartbeatTimeout-c.LeaseMargin <= MaxMissedHeartbeats*c.HeartbeatInterval {
		return fmt.Errorf("task config: HeartbeatTimeout (%s) less LeaseMargin (%s) must exceed %d × HeartbeatInterval (%s)",
			c.HeartbeatTimeout, c.LeaseMargin, MaxMissedHeartbeats, c.HeartbeatInterval)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("task config: MaxAttempts must be in 1..%d, got %d", MaxAttemptsLimit, c.MaxAttempts)
	}
	if c.PayloadLimit < 1 {
		return fmt.Errorf("task config: PayloadLimit must be positive, got %d", c.PayloadLimit)
	}
	if c.BackoffMax < c.BackoffBase {
		return fmt.Errorf("task config: BackoffMax (%s) is below BackoffBase (%s)", c.BackoffMax, c.BackoffBase)
	}
	if c.EnqueueQuota < 1 {
		return fmt.Errorf("task config: EnqueueQuota must be positive, got %d", c.EnqueueQuota)
	}
	if c.Backoff != nil {
		if err := c.Backoff.Validate(); err != nil {
			return fmt.Errorf("task config: %w", err)
		}
	}
	return nil
}
