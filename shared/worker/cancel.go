package worker

import (
	"time"

	"github.com/openatf/atf/shared/task"
)

// ErrCancelled is the cause of a handler's context when its task was cancelled while it ran:
// errors.Is(context.Cause(ctx), worker.ErrCancelled). The handler should return soon; whatever it
// returns, the task ends cancelled.
var ErrCancelled = task.ErrCancelled

// Cancellation is the cause the executor gives a handler's context when the task is cancelled
// while it runs. It matches ErrCancelled. Grace is how long the handler has to return: a Program's
// process group gets SIGTERM at once and SIGKILL after Grace. A Go handler that ignores it runs on
// until its lease ends, when the executor stops it as it stops any handler that lost its lease.
type Cancellation struct {
	Grace time.Duration
}

func (c Cancellation) Error() string {
	return "task cancelled while running (grace " + c.Grace.String() + ")"
}

// Unwrap makes a Cancellation match ErrCancelled.
func (c Cancellation) Unwrap() error { return ErrCancelled }
