package consumerfn_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/service/consumer"
)

// drainer is a sweeper that drains too, counting its drains.
type drainer struct {
	sweeper
	drains int
	fail   bool
}

func (d *drainer) Drain(context.Context) (consumer.DrainStats, error) {
	d.drains++
	if d.fail {
		return consumer.DrainStats{}, errors.New("SQS unavailable")
	}
	return consumer.DrainStats{Receives: 3}, nil
}

// TestDrainOncePerInterval: the first invocation drains the dead-letter queues (a cold start),
// the next ones only once DrainInterval has passed since; a failed drain fails no invocation;
// a negative interval never drains.
func TestDrainOncePerInterval(t *testing.T) {
	c := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	d := &drainer{sweeper: sweeper{clock: c}}
	h := consumerfn.New(d, consumerfn.Config{Now: c.Now, Wait: c.Wait, Logger: slog.New(slog.DiscardHandler), DrainInterval: 5 * time.Minute})
	var drains []int
	for minute := range 11 {
		c.now = time.Date(2026, 3, 1, 12, minute, 0, 0, time.UTC)
		d.fail = minute == 5
		if err := h.Handle(t.Context(), events.EventBridgeEvent{Time: c.now}); err != nil {
			t.Fatalf("minute %d: %v", minute, err)
		}
		drains = append(drains, d.drains)
	}
	want := []int{1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3}
	for i := range want {
		if drains[i] != want[i] {
			t.Fatalf("drains after each minute: %v, want %v", drains, want)
		}
	}

	never := &drainer{sweeper: sweeper{clock: c}}
	h = consumerfn.New(never, consumerfn.Config{Now: c.Now, Wait: c.Wait, Logger: slog.New(slog.DiscardHandler), DrainInterval: -1})
	if err := h.Handle(t.Context(), events.EventBridgeEvent{Time: c.now}); err != nil || never.drains != 0 {
		t.Fatalf("a negative interval: %d drains, %v", never.drains, err)
	}
}
