package consumer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// The drain of the dead-letter queues. A task's message goes to its queue's dead-letter queue
// once received MaxReceiveCount times without a claim settled (a claim settled either way
// deletes it): workers crashed on it, or its claims failed again and again. Its task is then
// still enqueued, and the resend lane would send it again after its enqueue timeout anyway, but
// the message would stay in the dead-letter queue for its retention. Drain reads those messages:
//
//   - a task still enqueued runs again: its message is sent again at once, counting its trip
//     (task.DeadLettered), so that a task whose messages keep going there ends dead after
//     task.MaxDeadLetterTrips trips in a row, saying why, rather than loop;
//   - a task still running under a lease that a queue message times (task.Task.Message) goes back
//     to the store's timer (task.Rearm): its message may be this one, which no redelivery will
//     bring back, so nothing else would time the lease out;
//   - a message whose task moved on (claimed, ended, enqueued again by a gate) or is gone is stale;
//     one sent before its task was written (task.Message.Nonce) is buried first, as its claim
//     would have (task.Store.Bury), unless the task landed meanwhile: then it is the task's;
//   - a body that is no task message of its queue is poison: logged at error level, with its head;
//
// and deletes each once handled. A message whose handling failed (the store or the queue did) is
// left for the next drain.

// Drain settings.
const (
	// DrainBatches bounds the receives from one dead-letter queue in one drain: at most
	// DrainBatches × 10 messages. An idle queue costs one receive.
	DrainBatches = 10
	// DrainWait is the long poll of a drain's first receive from a queue: a short one, since
	// every queue is read at once. (A receive without a wait samples only some of SQS's
	// servers, and may miss the few messages of a dead-letter queue.)
	DrainWait = time.Second
	// drainVisibility hides a message received by a drain while it handles it.
	drainVisibility = 30 * time.Second
	// drainTimeout bounds one drain.
	drainTimeout = 30 * time.Second
	// DrainReaders is how many dead-letter queues a drain reads at once, and the idle connections
	// the functions' SQS client keeps (awsfn.Open). An idle queue holds its receive for
	// DrainWait, so a drain of Q idle queues takes about ⌈Q / DrainReaders⌉ × DrainWait:
	// 9 s for 300 lambdas of 3 priorities, where the consumer's Workers (8) took 113 s, past
	// drainTimeout, and the queues read last were never drained.
	DrainReaders = 100
	// DefaultDrainInterval is how often a consumer drains: a drain of an idle environment costs
	// one receive per dead-letter queue (docs/capacity.md).
	DefaultDrainInterval = 5 * time.Minute
)

// drainLoop drains at once, then every drain interval, until ctx ends.
func (c *Consumer) drainLoop(ctx context.Context) {
	t := time.NewTicker(c.drainEvery)
	defer t.Stop()
	for {
		if st, err := c.Drain(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("drain of the dead-letter queues failed", "err", err)
		} else if st.Resent+st.Dead+st.Stale+st.Poison+st.Failed+st.Rearmed > 0 {
			c.log.Info("drained the dead-letter queues", "resent", st.Resent, "dead", st.Dead, "stale", st.Stale, "poison", st.Poison, "failed", st.Failed, "rearmed", st.Rearmed)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DrainStats counts what one drain did with the messages it read.
type DrainStats struct {
	Resent int // tasks still enqueued, whose message was sent again
	Dead   int // tasks ended dead, their messages having gone there too often
	Stale  int // messages whose task moved on or is gone
	Poison int // bodies that are no task message
	// Rearmed counts running tasks given back to the store's lease timer: their queue message
	// timed their lease (task.Task.Message).
	Rearmed int
	Failed  int // messages left for the next drain: the store or the queue failed
	// Receives counts the receives from dead-letter queues, what an idle environment pays for.
	Receives int
}

func (s *DrainStats) add(o DrainStats) {
	s.Resent += o.Resent
	s.Dead += o.Dead
	s.Stale += o.Stale
	s.Poison += o.Poison
	s.Rearmed += o.Rearmed
	s.Failed += o.Failed
	s.Receives += o.Receives
}

// Drain reads the dead-letter queues of every lambda's priorities once, DrainReaders at a time,
// and handles what it finds (see above). A drain cut short by its bound leaves the queues it did
// not reach to the next one, which starts with them: no queue goes unread drain after drain. It does nothing for a queue without dead-letter queues
// (one that is not a task.DeadLetterQueue, such as the embedded one). It returns the errors of
// the queues it could not read.
func (c *Consumer) Drain(ctx context.Context) (DrainStats, error) {
	dl, ok := c.queue.(task.DeadLetterQueue)
	if !ok {
		return DrainStats{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	lambdas, err := c.lambdas.Lambdas(ctx)
	if err != nil {
		return DrainStats{}, err
	}
	type lane struct{ lambda, priority string }
	var lanes []lane
	for _, l := range lambdas {
		for _, p := range l.Priorities {
			lanes = append(lanes, lane{l.Name, p})
		}
	}
	if len(lanes) == 0 {
		return DrainStats{}, nil
	}
	// Start where the last drain was cut short, so that the queues it did not reach come first.
	from := int(c.drainFrom.Load()) % len(lanes)
	lanes = append(lanes[from:], lanes[:from]...)
	stats := make([]DrainStats, len(lanes))
	errs := make([]error, len(lanes))
	reached := make([]bool, len(lanes)) // its read began before the drain's bound
	slots := make(chan struct{}, DrainReaders)
	var wg sync.WaitGroup
	for i, ln := range lanes {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			reached[i] = ctx.Err() == nil
			stats[i], errs[i] = c.drainQueue(ctx, dl, ln.lambda, ln.priority)
		})
	}
	wg.Wait()
	next := 0
	if i := slices.Index(reached, false); i >= 0 {
		next = (from + i) % len(lanes)
	}
	c.drainFrom.Store(int64(next))
	var st DrainStats
	for _, s := range stats {
		st.add(s)
	}
	return st, errors.Join(errs...)
}

// drainQueue reads one dead-letter queue, a batch at a time, until a batch comes short or it has
// read DrainBatches.
func (c *Consumer) drainQueue(ctx context.Context, dl task.DeadLetterQueue, lambda, priority string) (DrainStats, error) {
	var st DrainStats
	wait := DrainWait
	for range DrainBatches {
		st.Receives++
		letters, err := dl.ReceiveDead(ctx, task.ReceiveParams{Lambda: lambda, Priority: priority, Max: 10, Wait: wait, Visibility: drainVisibility})
		if err != nil {
			return st, err
		}
		for _, l := range letters {
			c.drainOne(ctx, dl, l, &st)
		}
		if len(letters) < 10 {
			return st, nil
		}
		wait = 0 // more are there: no need to wait for them
	}
	return st, nil
}

// drainOne handles one message of a dead-letter queue, and deletes it unless that failed.
func (c *Consumer) drainOne(ctx context.Context, dl task.DeadLetterQueue, l task.DeadLetter, st *DrainStats) {
	log := c.log.With("lambda", l.Lambda, "priority", l.Priority, "task_id", l.TaskID, "receive_count", l.ReceiveCount)
	if l.TaskID == "" {
		log.Error("poison message in a dead-letter queue: it names no task of its queue; deleted", "body", l.Poison, "err", l.Why)
		st.Poison++
	} else {
		trips := l.DeadLetterTrips + 1
		rearmed, refused := false, false
		deadLettered := func(t task.Task) (next task.Task, err error) {
			if rearmed = t.LeaseOnQueue(); rearmed {
				next, err = task.Rearm(t, c.now().UTC())
			} else {
				next, err = task.DeadLettered(t, trips, c.now().UTC(), c.cfg)
			}
			refused = err != nil // the task as read is not the message's
			return next, err
		}
		t, err := task.ApplyState(ctx, c.store, l.Lambda, l.TaskID, deadLettered)
		if errors.Is(err, task.ErrNotFound) && l.Nonce != "" {
			// Sent before its task's create, which may still land: as a claim would, bury it.
			if err = c.store.Bury(ctx, l.Lambda, l.TaskID, l.Nonce, c.now().UTC().Add(task.TombstoneLife)); errors.Is(err, task.ErrExists) {
				t, err = task.ApplyState(ctx, c.store, l.Lambda, l.TaskID, deadLettered)
			} else if err == nil {
				err = task.Errorf(task.ErrNotFound, "task %s not found; its message is dropped", l.TaskID)
			}
		}
		switch {
		case errors.Is(err, task.ErrConflict) && !refused:
			// The task kept changing under the write: it may still need this message (its lease
			// timer). Left for the next drain.
			log.Warn("a task of a dead-letter queue kept changing; the next drain tries again", "err", err)
			st.Failed++
			return
		case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound):
			log.Debug("stale message in a dead-letter queue; deleted", "reason", err)
			st.Stale++
		case err != nil:
			log.Warn("could not handle a message of a dead-letter queue; the next drain tries again", "err", err)
			st.Failed++
			return
		case rearmed:
			log.Warn("the message that timed a running task's lease went to the dead-letter queue; the store times the lease again", "status", t.Status)
			st.Rearmed++
		case t.Status == task.StatusDead:
			// "status": "dead" is what the dead tasks' metric counts.
			log.Warn("task dead: its messages keep going to the dead-letter queue", "status", t.Status, "trips", trips)
			st.Dead++
		default:
			m := t.MessageAt(time.Now())
			m.DeadLetterTrips = trips
			if err := c.queue.Send(ctx, m); err != nil {
				// The task is enqueued, due for a resend after its enqueue timeout: the resend
				// lane sends it if the next drain cannot either.
				log.Warn("could not send a dead-lettered task again; the next drain tries again", "err", err)
				st.Failed++
				return
			}
			log.Info("dead-lettered task sent again", "trips", trips)
			st.Resent++
		}
	}
	if err := dl.DeleteDead(ctx, l.Delivery); err != nil {
		log.Warn("could not delete a message of a dead-letter queue; the next drain sees it again", "err", err)
	}
}
