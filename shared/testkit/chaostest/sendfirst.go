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
// Other creates pass through, but for the first Hold of those sent first, which are held until
// a claim of their (first task's) message found no task and buried it, so that some creates come
// after their message was dropped, whatever the timing.
type SendFirstFaults struct {
	task.Store
	Rate     float64
	MaxDelay time.Duration
	Hold     int
	faults   atomic.Int64
	buried   atomic.Int64 // creates refused because their message had been dropped
	late     sync.WaitGroup

	mu      sync.Mutex
	held    int
	burials map[string]chan struct{} // closed once its lambda/id/nonce is buried
}

// Faults is how many creates were broken.
func (s *SendFirstFaults) Faults() int { return int(s.faults.Load()) }

// Buried is how many creates, broken or not, were refused as buried (task.ErrBuried): those whose
// message a claim found first, and dropped.
func (s *SendFirstFaults) Buried() int { return int(s.buried.Load()) }

// Wait waits for the writes given up on to land.
func (s *SendFirstFaults) Wait() { s.late.Wait() }

func (s *SendFirstFaults) Create(ctx context.Context, t task.Task) error {
	write := func(ctx context.Context) error { return s.Store.Create(ctx, t) }
	if held, err := s.hold(ctx, []task.Task{t}); held || err != nil {
		return s.counted(ctx, err, write)
	}
	return s.create(ctx, t.Nonce != "", write)
}

func (s *SendFirstFaults) CreateBatch(ctx context.Context, tasks []task.Task) error {
	write := func(ctx context.Context) error { return s.Store.CreateBatch(ctx, tasks) }
	if held, err := s.hold(ctx, tasks); held || err != nil {
		return s.counted(ctx, err, write)
	}
	sentFirst := false
	for _, t := range tasks {
		sentFirst = sentFirst || t.Nonce != ""
	}
	return s.create(ctx, sentFirst, write)
}

// counted writes a held create once its hold ended without err, counting a refusal as buried.
func (s *SendFirstFaults) counted(ctx context.Context, err error, write func(context.Context) error) error {
	if err == nil {
		err = write(ctx)
	}
	if errors.Is(err, task.ErrBuried) {
		s.buried.Add(1)
	}
	return err
}

func (s *SendFirstFaults) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	err := s.Store.Bury(ctx, lambda, id, nonce, until)
	if err == nil {
		s.mu.Lock()
		ch := s.burialLocked(lambda + "/" + id + "/" + nonce)
		select {
		case <-ch: // buried again: a second claim of the message
		default:
			close(ch)
		}
		s.mu.Unlock()
	}
	return err
}

// burial is the channel closed once key is buried.
func (s *SendFirstFaults) burial(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.burialLocked(key)
}

func (s *SendFirstFaults) burialLocked(key string) chan struct{} {
	if s.burials == nil {
		s.burials = map[string]chan struct{}{}
	}
	ch, ok := s.burials[key]
	if !ok {
		ch = make(chan struct{})
		s.burials[key] = ch
	}
	return ch
}

// hold holds the create of tasks, if it is one of the first Hold sent first, until the message
// of its first task is buried, or ctx ends; it reports whether it held it. A held create is not
// broken otherwise.
func (s *SendFirstFaults) hold(ctx context.Context, tasks []task.Task) (bool, error) {
	t := tasks[0]
	s.mu.Lock()
	held := t.Nonce != "" && s.held < s.Hold
	if held {
		s.held++
	}
	s.mu.Unlock()
	if !held {
		return false, nil
	}
	select {
	case <-s.burial(t.Lambda + "/" + t.ID + "/" + t.Nonce):
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
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
