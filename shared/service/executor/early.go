package executor

import (
	"context"
	"time"

	"github.com/openatf/atf/shared/task"
)

// AwaitRunAt waits until m's run time before its task is claimed: a message sent ahead of its task
// (task.EnqueueAhead) is delayed in whole seconds, rounded down, so it may arrive up to a second
// early. It returns at once for a message sent when its task was due, and false if ctx ends first.
func AwaitRunAt(ctx context.Context, m task.Message) bool {
	d := m.Early(time.Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
