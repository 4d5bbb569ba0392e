// Package consumerfn runs the store consumer as a function. EventBridge can invoke a function
// at most once a minute, so each invocation sweeps about every second until shortly before its
// minute is up: a due task then waits about a second for its sweep, not a minute. Each lambda is
// swept on a schedule of its own (consumer.Run), so a slow one delays no other. With
// Config.StopWhenIdle, a lambda's sweeps end as soon as nothing of it is due before the minute is
// up, and the invocation with the last of them: an idle environment pays for one sweep and one
// look ahead a minute, not a minute of sweeps. Overlapping invocations (one running late) are
// harmless: every move of a task is a conditional write. Where the environment reserves
// concurrency, the stack gives the function a reserved concurrency of one, so they stay rare.
package consumerfn

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/service/consumer"
)

// Defaults of Config.
const (
	// DefaultInterval is the time between the starts of two sweeps.
	DefaultInterval = time.Second
	// DefaultMargin is how long before the end of its minute, or its deadline, an invocation
	// starts no new sweep: the last one must finish in time.
	DefaultMargin = 2 * time.Second
	// Period is how often EventBridge invokes the function (rate(1 minute)).
	Period = time.Minute
)

// Sweeper is the consumer as the function uses it.
type Sweeper interface {
	Sweep(ctx context.Context) (consumer.Stats, error)
}

// Runner is a Sweeper that can sweep each lambda on a schedule of its own, as the consumer does
// (consumer.Run). Handle runs it for the whole invocation instead of sweeping every lambda
// together each interval, so that a slow lambda delays no other.
type Runner interface {
	Run(ctx context.Context, p consumer.RunParams) consumer.RunStats
}

// Drainer is a Sweeper that drains the dead-letter queues (consumer.Consumer.Drain). Handle
// drains once in an invocation, beside its sweeps, at most once every Config.DrainInterval.
type Drainer interface {
	Drain(ctx context.Context) (consumer.DrainStats, error)
}

// Config configures a Handler.
type Config struct {
	// DrainInterval is the least time between two drains of the dead-letter queues: the drain
	// runs in the first invocation after it (a cold start drains at once).
	// consumer.DefaultDrainInterval if zero; never if negative.
	DrainInterval time.Duration
	Interval      time.Duration // DefaultInterval if zero
	Margin        time.Duration // DefaultMargin if zero
	Now           func() time.Time
	// Wait blocks for d or until ctx ends; tests replace it to advance a fake clock.
	Wait   func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
	// StopWhenIdle ends the invocation early once nothing is due before its minute is up
	// (consumer.RunParams.StopWhenIdle); only a Runner can. What comes due later, or is scheduled
	// due while no invocation runs, waits for the next one: at most a minute. The deployed
	// function sets it; it suits a schedule path that sends tasks due soon to their queue itself,
	// leaving the consumer the far future, timeouts, resends, retries and flows.
	StopWhenIdle bool
}

// Deployed is the configuration of the deployed consumer function (functions/consumer), which
// the bench prices as deployed. It stops as soon as nothing is due soon: the schedule path sends
// tasks due within 15 minutes to their queues itself, and a lambda with a task in flight keeps
// its passes (consumer.RunParams.StopWhenIdle). What comes due while it is stopped waits for the
// next invocation, at most a minute: the first check of a task scheduled with upstreams, and the
// tasks of a gate that opened (docs/guarantees.md, "The consumer's minute").
func Deployed(logger *slog.Logger) Config {
	return Config{Logger: logger, StopWhenIdle: true}
}

// Handler handles the scheduled events.
type Handler struct {
	sweeper Sweeper
	cfg     Config
	// lastDrain is when this instance of the function last drained (invocations of one
	// instance never overlap).
	lastDrain time.Time
}

// New returns a Handler that sweeps with s.
func New(s Sweeper, c Config) *Handler {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Margin <= 0 {
		c.Margin = DefaultMargin
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Wait == nil {
		c.Wait = wait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DrainInterval == 0 {
		c.DrainInterval = consumer.DefaultDrainInterval
	}
	return &Handler{sweeper: s, cfg: c}
}

// Handle sweeps until the event's minute, or the invocation's deadline, is nearly over. Failed
// sweeps are logged and the next one tries again; the invocation fails only if no sweep
// succeeded, so an alarm on function errors means the consumer is really stuck.
func (h *Handler) Handle(ctx context.Context, e events.EventBridgeEvent) error {
	start := h.cfg.Now()
	// Stop with the event's minute (a late invocation gets what is left of it, at least one
	// sweep), and before the invocation's deadline.
	end := start.Add(Period - h.cfg.Margin)
	if !e.Time.IsZero() {
		end = earliest(end, e.Time.Add(Period-h.cfg.Margin))
	}
	if d, ok := ctx.Deadline(); ok {
		end = earliest(end, d.Add(-h.cfg.Margin))
	}
	drained := h.drain(ctx, start)
	defer func() { <-drained }()
	var total consumer.Stats
	sweeps, failed := 0, 0
	var lastErr error
	if r, ok := h.sweeper.(Runner); ok {
		// Each pass ends within its own deadline, and before ctx's, its sends included.
		rs := r.Run(ctx, consumer.RunParams{Interval: h.cfg.Interval, Until: end, StopWhenIdle: h.cfg.StopWhenIdle})
		total, sweeps, failed, lastErr = rs.Stats, rs.Passes, rs.Failed, rs.Err
	} else {
		for next := start; ; next = next.Add(h.cfg.Interval) {
			st, err := h.sweeper.Sweep(ctx)
			sweeps++
			total.Enqueued += st.Enqueued
			total.TimedOut += st.TimedOut
			total.Dead += st.Dead
			total.Dropped += st.Dropped
			if err != nil {
				failed++
				lastErr = err
				h.cfg.Logger.Error("sweep failed", "err", err)
			}
			if !next.Add(h.cfg.Interval).Before(end) || ctx.Err() != nil {
				break
			}
			if err := h.cfg.Wait(ctx, next.Add(h.cfg.Interval).Sub(h.cfg.Now())); err != nil {
				break
			}
		}
	}
	h.cfg.Logger.Info("swept", "event_time", e.Time, "sweeps", sweeps, "failed", failed,
		"enqueued", total.Enqueued, "timed_out", total.TimedOut, "dead", total.Dead, "dropped", total.Dropped)
	if failed > 0 && failed == sweeps {
		return errors.Join(errors.New("every sweep failed"), lastErr)
	}
	return nil
}

// drain starts a drain of the dead-letter queues beside the sweeps if one is due, and returns a
// channel closed once it is over (at once if there is none).
func (h *Handler) drain(ctx context.Context, now time.Time) <-chan struct{} {
	done := make(chan struct{})
	d, ok := h.sweeper.(Drainer)
	if !ok || h.cfg.DrainInterval < 0 || !h.lastDrain.IsZero() && now.Sub(h.lastDrain) < h.cfg.DrainInterval {
		close(done)
		return done
	}
	h.lastDrain = now
	go func() {
		defer close(done)
		st, err := d.Drain(ctx)
		if err != nil {
			h.cfg.Logger.Error("drain of the dead-letter queues failed", "err", err)
		}
		h.cfg.Logger.Info("drained", "receives", st.Receives, "resent", st.Resent, "dead", st.Dead,
			"stale", st.Stale, "poison", st.Poison, "failed", st.Failed)
	}()
	return done
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
