package chaostest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
)

// SendFirstFaults breaks the creates of tasks whose messages were sent first (task.Task.Nonce),
// the crash between send and write: a share (Rate) of them fails, each one way of four chosen at
// random:
//   - before the write: nothing is written, and the message is of no task;
//   - after the write: the task is written, and the caller cannot tell;
//   - slowly: the write waits up to MaxDelay, so that the message is received first;
//   - given up: the caller gets an error at once, and the write lands up to MaxDelay later, as a
//     write a client gave up on may.
//
// Other creates pass through.
type SendFirstFaults struct {
	task.Store
	Rate     float64
	MaxDelay time.Duration
	faults   atomic.Int64
	buried   atomic.Int64 // creates refused because their message had been dropped
	late     sync.WaitGroup
}

// Faults is how many creates were broken.
func (s *SendFirstFaults) Faults() int { return int(s.faults.Load()) }

// Buried is how many creates, broken or not, were refused as buried (task.ErrBuried): those whose
// message a claim found first, and dropped.
func (s *SendFirstFaults) Buried() int { return int(s.buried.Load()) }

// Wait waits for the writes given up on to land.
func (s *SendFirstFaults) Wait() { s.late.Wait() }

func (s *SendFirstFaults) Create(ctx context.Context, t task.Task) error {
	return s.create(ctx, t.Nonce != "", func(ctx context.Context) error { return s.Store.Create(ctx, t) })
}

func (s *SendFirstFaults) CreateBatch(ctx context.Context, tasks []task.Task) error {
	sentFirst := false
	for _, t := range tasks {
		sentFirst = sentFirst || t.Nonce != ""
	}
	return s.create(ctx, sentFirst, func(ctx context.Context) error { return s.Store.CreateBatch(ctx, tasks) })
}

func (s *SendFirstFaults) create(ctx context.Context, sentFirst bool, write func(context.Context) error) error {
	counted := func(err error) error {
		if errors.Is(err, task.ErrBuried) {
			s.buried.Add(1)
		}
		return err
	}
	if !sentFirst || rand.Float64() >= s.Rate {
		return counted(write(ctx))
	}
	s.faults.Add(1)
	delay := rand.N(s.MaxDelay)
	switch rand.IntN(4) {
	case 0:
		return errInjected("create, before the write")
	case 1:
		if err := write(ctx); err != nil {
			return counted(err)
		}
		return errInjected("create, after the write")
	case 2:
		time.Sleep(delay)
		return counted(write(ctx))
	default:
		s.late.Go(func() {
			time.Sleep(delay)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = counted(write(ctx))
		})
		return errInjected("create, given up on while it lands later")
	}
}
