package frontend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Sending ahead: a task that runs within task.MaxSendAhead is created enqueued and its message
// sent by the schedule request itself, delayed to its run time, rather than created new for the
// consumer's next sweep to enqueue. That saves the enqueue transition (its writes and the sweep's
// reads) and the wait for a sweep. A task is sent ahead only when the consumer would enqueue it
// at once: it waits for no upstream, no gate holds it, and its lambda has room under its cap on
// enqueued tasks (task.Lambda.MaxEnqueued). Any other task, or any when the reads that decide
// fail, is created as before and left to the consumer.

// SnapshotAge is how long a request trusts the gates and the room it read: a gate set by another
// process acts on the schedule path within it, as on a sweep within a poll; one set through this
// Service, at once. The claim checks the gates again (status.Controller.Claim), so a task sent
// ahead before its gate closed does not run while it is closed.
const SnapshotAge = time.Second

// sendTimeout bounds the sending of a request's messages, and then the writes that make the tasks
// of a failed send due again.
const sendTimeout = 10 * time.Second

// admission is what the schedule path reads to decide which tasks it sends ahead, kept for
// SnapshotAge so that a busy API reads it once a second rather than once a request.
type admission struct {
	gates *task.GateSnapshot
	mu    sync.Mutex
	rooms map[string]room
}

// room is how many more tasks a lambda may have enqueued: its cap less its count of enqueued
// tasks when read, less what was sent ahead since.
type room struct {
	left int
	read time.Time
}

// take reserves up to n places under lambda's cap, leaving keep of them, and returns how many it
// got.
func (s *Service) take(ctx context.Context, l task.Lambda, n, keep int, now time.Time) (int, error) {
	a := &s.admission
	a.mu.Lock()
	r, ok := a.rooms[l.Name]
	a.mu.Unlock()
	if !ok || now.Sub(r.read) >= SnapshotAge || now.Before(r.read) {
		counts, err := s.store.Counts(ctx, l.Name)
		if err != nil {
			return 0, err
		}
		// A count that drifted below zero counts as none.
		r = room{left: max(l.EnqueuedCap(s.cfg)-max(counts[task.StatusEnqueued], 0), 0), read: now}
	}
	got := max(min(n, r.left-keep), 0)
	r.left -= got
	a.mu.Lock()
	if a.rooms == nil {
		a.rooms = map[string]room{}
	}
	a.rooms[l.Name] = r
	a.mu.Unlock()
	return got, nil
}

// enqueueAhead moves the tasks of a request, built but not yet stored, that can be sent ahead to
// enqueued, in place, and returns their messages: to send before the tasks are stored
// (createSentFirst), or once they are (send).
func (s *Service) enqueueAhead(ctx context.Context, tasks []task.Task, now time.Time) []task.Message {
	if s.queue == nil {
		return nil
	}
	byLambda := map[string][]int{}
	for i, t := range tasks {
		if t.Status == task.StatusNew && t.AfterCount == 0 && t.NextTriggerAt != nil && t.NextTriggerAt.Sub(now) <= task.MaxSendAhead {
			byLambda[t.Lambda] = append(byLambda[t.Lambda], i)
		}
	}
	if len(byLambda) == 0 {
		return nil
	}
	gates, err := s.admission.gates.At(ctx, now)
	if err != nil {
		return nil // the consumer enqueues them
	}
	var msgs []task.Message
	for name, idx := range byLambda {
		open := idx[:0:0]
		for _, i := range idx {
			if task.GateMode(gates, name, tasks[i].Collection) == task.GateOpen {
				open = append(open, i)
			}
		}
		// A task due now may take the whole room; one due later only what leaves half the cap to
		// tasks due now: it holds its place in flight while it cannot run, and the consumer's
		// room for what comes due meanwhile is the same cap.
		var dueNow, later []int
		for _, i := range open {
			if tasks[i].NextTriggerAt.Sub(now) <= SnapshotAge {
				dueNow = append(dueNow, i)
			} else {
				later = append(later, i)
			}
		}
		l, err := s.lambda(ctx, name) // read by the request already: from the catalog's snapshot
		if err != nil {
			continue // the consumer enqueues them
		}
		for _, part := range []struct {
			idx  []int
			keep int
		}{{dueNow, 0}, {later, l.EnqueuedCap(s.cfg) / 2}} {
			if len(part.idx) == 0 {
				continue
			}
			got, err := s.take(ctx, l, len(part.idx), part.keep, now)
			if err != nil {
				break
			}
			for _, i := range part.idx[:got] { // earliest in the request first, as the consumer would
				next, m, err := task.EnqueueAhead(tasks[i], now, s.cfg)
				if err != nil {
					continue
				}
				tasks[i] = next
				msgs = append(msgs, m)
			}
		}
	}
	return msgs
}

// createSentFirst creates tasks, built but not yet stored, with create (a Create of the one, or
// a CreateBatch), with those it can send ahead enqueued (enqueueAhead), and returns how many it
// sent ahead.
//
// With SendFirst (Config.SendFirst), it sends their messages first, each with a nonce of its own
// that its task's create carries (task.SendFirst). So a task stored enqueued always has its
// message on the way, and needs no resend trigger: the message may only come too early, before
// the create lands, or for a create that never does; its claim then buries the nonce
// (task.Store.Bury), and a create that lands after fails with task.ErrBuried. Then, and if the
// send fails, the tasks are created as built instead, new and due, for the consumer: a message
// that went all the same finds its task new, and its claim drops it. One send per request, so
// that a claim's burial never makes more sends, claims and tombstones.
//
// Without it, the tasks are created first, with their resend trigger, and their messages sent
// once they are (send): a claim that comes before its create (a worker that predates nonces)
// may drop its message, and the consumer resends it. (Redrives and schedule firings write first
// too.)
func (s *Service) createSentFirst(ctx context.Context, tasks []task.Task, now time.Time, create func([]task.Task) error) (int, error) {
	built := slices.Clone(tasks)
	msgs := s.enqueueAhead(ctx, tasks, now)
	if !s.sendFirst {
		err := create(tasks)
		if len(msgs) > 0 && (err == nil || !task.Refused(err)) {
			s.send(ctx, msgs, now) // the create may have landed: a message too many fails its claim
		}
		return len(msgs), err
	}
	at := make(map[task.Ref]int, len(msgs))
	for i, t := range tasks {
		if t.Status != built[i].Status {
			at[t.Ref()] = i
		}
	}
	for j, m := range msgs {
		i := at[task.Ref{Lambda: m.Lambda, ID: m.TaskID}]
		tasks[i], msgs[j] = task.SendFirst(tasks[i], m)
		msgs[j] = msgs[j].WithState(tasks[i])
	}
	if len(msgs) > 0 {
		sctx, cancel := s.sendContext(ctx, now)
		err := s.queue.Send(sctx, msgs...)
		cancel()
		if err != nil {
			s.log.Warn("could not send the messages of tasks to send ahead; they are created for the consumer", "tasks", len(msgs), "err", err)
			copy(tasks, built)
			msgs = nil
		}
	}
	err := create(tasks)
	if errors.Is(err, task.ErrBuried) {
		s.log.Info("a claim dropped the message of a task before its create landed; the tasks are created for the consumer", "err", err)
		copy(tasks, built)
		return 0, create(tasks)
	}
	return len(msgs), err
}

// sendContext bounds a request's sends: sendTimeout from now, and ctx's deadline if it has an
// earlier one (the consumer's pass that fires a schedule), even when ctx is cancelled: the tasks
// are stored, and their messages should go.
func (s *Service) sendContext(ctx context.Context, now time.Time) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(sendTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
}

// send puts the messages of tasks just stored enqueued (a firing's, a redrive's: written first,
// with their resend trigger) on their queues. If that fails, each task
// is made due again after a poll interval (task.Unsent), as the consumer does with a failed send,
// so that a sweep sends it: the request has succeeded either way, since its tasks are stored.
func (s *Service) send(ctx context.Context, msgs []task.Message, now time.Time) {
	sctx, cancel := s.sendContext(ctx, now)
	defer cancel()
	wctx, wcancel := s.sendContext(ctx, now)
	defer wcancel()
	if err := task.SendOrUnsent(sctx, wctx, s.queue, s.store, msgs, now, s.cfg); err != nil {
		s.log.Warn("could not send the messages of tasks sent ahead; they are due again soon", "tasks", len(msgs), "err", err)
		s.notify()
	}
}
