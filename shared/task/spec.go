package task

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"time"
)

// Spec is a request to schedule one task, as a client sends it. Zero fields take defaults.
type Spec struct {
	// Lambda is the task's lambda in a batch that spans lambdas; empty means the batch's.
	Lambda     string
	ID         string
	Payload    json.RawMessage
	RunAt      *time.Time
	Delay      *time.Duration
	Priority   string
	Collection string
	// Key is the task's tenant (Task.Key); empty for none.
	Key         string
	MaxAttempts int
	Deadline    *time.Time
	// After names upstream tasks; a Ref with no Lambda names a task of the same lambda.
	After []Ref
	// Trigger is the trigger rule: TriggerAllSuccess (the default) or TriggerAllDone.
	Trigger string
}

// MaxDelay bounds how far ahead a task may be scheduled.
const MaxDelay = 366 * 24 * time.Hour

// MaxDeadline bounds how far after its run time a task's deadline may be. Stores keep times as
// int64 nanoseconds, which end in 2262; a far deadline ("never") is better left out.
const MaxDeadline = 10 * 366 * 24 * time.Hour

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
)

// ValidateName checks a lambda or priority name: lowercase letters, digits, '-' and '_', at most
// 64 characters. Names end up in URLs and queue names, so they stay plain.
func ValidateName(what, s string) error {
	if !namePattern.MatchString(s) {
		return Errorf(ErrInvalid, "%s %q: use 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit", what, Echo(s))
	}
	return nil
}

// ValidateID checks a task id or collection: letters, digits, '.', '_', ':' and '-', at most
// 128 characters.
func ValidateID(what, s string) error {
	if !idPattern.MatchString(s) {
		return Errorf(ErrInvalid, "%s %q: use 1 to 128 of A-Z, a-z, 0-9, '.', '_', ':' and '-', starting with a letter or digit", what, Echo(s))
	}
	return nil
}

// New validates s for lambda l and returns the task it describes, in status new.
func New(s Spec, l Lambda, now time.Time, c Config) (Task, error) {
	t := Task{
		ID: s.ID, Lambda: l.Name, Collection: s.Collection, Key: s.Key, Priority: s.Priority,
		Status: StatusNew, MaxAttempts: s.MaxAttempts, RunAt: now,
		CreatedAt: now, UpdatedAt: now, Version: 1,
	}
	if t.ID == "" {
		t.ID = NewID(now)
	} else if err := ValidateID("id", t.ID); err != nil {
		return Task{}, err
	}
	if t.Collection != "" {
		if err := ValidateID("collection", t.Collection); err != nil {
			return Task{}, err
		}
	}
	if t.Key != "" {
		if err := ValidateID("key", t.Key); err != nil {
			return Task{}, err
		}
	}
	if t.Priority == "" {
		t.Priority = l.DefaultPriority()
	} else if !l.HasPriority(t.Priority) {
		return Task{}, Errorf(ErrInvalid, "priority %q is not one of lambda %s's priorities %v", Echo(t.Priority), l.Name, l.Priorities)
	}
	switch {
	case t.MaxAttempts == 0 && l.MaxAttempts > 0:
		t.MaxAttempts = l.MaxAttempts
	case t.MaxAttempts == 0:
		t.MaxAttempts = c.MaxAttempts
	case t.MaxAttempts < 0 || t.MaxAttempts > MaxAttemptsLimit:
		return Task{}, Errorf(ErrInvalid, "max_attempts must be in 1..%d, got %d", MaxAttemptsLimit, t.MaxAttempts)
	}
	switch {
	case s.RunAt != nil && s.Delay != nil:
		return Task{}, Errorf(ErrInvalid, "give run_at or delay, not both")
	case s.Delay != nil && *s.Delay < 0:
		return Task{}, Errorf(ErrInvalid, "delay must not be negative, got %s", *s.Delay)
	case s.Delay != nil && *s.Delay > MaxDelay:
		return Task{}, Errorf(ErrInvalid, "delay must be at most %s, got %s", MaxDelay, *s.Delay)
	case s.Delay != nil:
		t.RunAt = now.Add(*s.Delay)
	case s.RunAt != nil && s.RunAt.Sub(now) > MaxDelay:
		return Task{}, Errorf(ErrInvalid, "run_at must be within %s from now", MaxDelay)
	case s.RunAt != nil && s.RunAt.After(now):
		t.RunAt = *s.RunAt
	}
	if s.Deadline != nil {
		if !s.Deadline.After(t.RunAt) {
			return Task{}, Errorf(ErrInvalid, "deadline %s is not after the run time %s", s.Deadline.Format(time.RFC3339), t.RunAt.Format(time.RFC3339))
		}
		if s.Deadline.Sub(t.RunAt) > MaxDeadline {
			return Task{}, Errorf(ErrInvalid, "deadline must be within %s of the run time; leave it out for none", MaxDeadline)
		}
		d := *s.Deadline
		t.Deadline = &d
	}
	switch s.Trigger {
	case "", TriggerAllSuccess, TriggerAllDone:
	default:
		return Task{}, Errorf(ErrInvalid, "trigger_rule %q is not one of %s, %s", Echo(s.Trigger), TriggerAllSuccess, TriggerAllDone)
	}
	if len(s.After) > 0 {
		after, err := ResolveRefs(l.Name, s.After)
		if err != nil {
			return Task{}, err
		}
		if slices.Contains(after, t.Ref()) {
			return Task{}, Errorf(ErrInvalid, "after: task %s cannot wait for itself", t.Ref())
		}
		t.After, t.AfterCount = after, len(after)
		t.Trigger = s.Trigger
		if t.Trigger == "" {
			t.Trigger = TriggerAllSuccess // shown in the task's JSON beside its after
		}
		t.Status = StatusPending // due at once: the consumer's check (see flow.go)
	} else if s.Trigger != "" {
		return Task{}, Errorf(ErrInvalid, "trigger_rule is for a task with upstreams (after)")
	}
	if len(s.Payload) > c.PayloadLimit {
		return Task{}, Errorf(ErrTooLarge, "payload is %d bytes; the limit is %d", len(s.Payload), c.PayloadLimit)
	}
	if len(s.Payload) > 0 {
		if err := CheckJSON("payload", s.Payload); err != nil {
			return Task{}, err
		}
		var b bytes.Buffer
		_ = json.Compact(&b, s.Payload) // valid: CheckJSON said so
		t.Payload = b.Bytes()
	}
	t.NextTriggerAt = at(t.RunAt)
	if t.Status == StatusPending {
		t.NextTriggerAt = at(now)
	}
	t.Spec = s.fingerprint(t)
	return t, nil
}

// fingerprint identifies the request as the client wrote it (a delay, not the run time it
// resolved to), so replaying the same request later still matches.
func (s Spec) fingerprint(t Task) string {
	var when any = s.RunAt
	if s.Delay != nil {
		when = s.Delay.String()
	}
	fields := []any{t.Lambda, t.ID, t.Payload, when, t.Priority, t.Collection, t.MaxAttempts, s.Deadline, s.After}
	if len(t.After) > 0 { // a task without upstreams keeps the fingerprint it always had
		fields[8] = t.After
		fields = append(fields, t.TriggerRule())
	}
	if t.Key != "" { // a task without a key keeps the fingerprint it always had
		fields = append(fields, "key", t.Key)
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func at(t time.Time) *time.Time { return &t }
