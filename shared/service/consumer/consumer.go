// Package consumer is the store consumer: it sweeps the store for due tasks and moves each one
// on. Due new and retriable tasks go to their queues in priority order, up to a per-lambda quota
// per sweep so a flood on one lambda cannot delay another's. Tasks whose queue message or worker
// was lost come due again through their timeouts and are re-enqueued or, with their attempts
// used up, marked dead. Gates hold (pause) or discard (drop) a lambda's or collection's waiting
// tasks.
//
// Every move is a conditional write, so two consumers, or a stale due-index entry, can never move
// a task twice.
package consumer

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Defaults of Config.
const (
	// DefaultWorkers is how many lambdas a consumer sweeps at once.
	DefaultWorkers = 8
	// DefaultPassTimeout bounds one lambda's pass: its reads, its writes and its sends. A lambda
	// whose store calls are slow or throttled (the SDK tries a call up to 8 times) holds up only
	// its own pass, and only this long.
	DefaultPassTimeout = 5 * time.Second
	// DefaultSendTimeout is the time a pass keeps for sending what it wrote. Its reads and writes
	// stop this long before its deadline, and its sends outlive a cancellation by as much, so a
	// pass cut short never leaves a task written as enqueued without its message.
	DefaultSendTimeout = time.Second
)

// sendRetryDelay is how long a pass waits before it sends a failed batch a second time.
const sendRetryDelay = 50 * time.Millisecond

// Config configures a Consumer. Zero fields take defaults.
type Config struct {
	// Lambdas are the lambdas to sweep. Run reads them again every interval and follows their
	// changes: it starts sweeping a lambda that appears, and stops sweeping one that goes.
	Lambdas     task.Catalog
	Task        task.Config
	Now         func() time.Time
	Jitter      func() float64
	Logger      *slog.Logger
	Workers     int           // DefaultWorkers if zero
	PassTimeout time.Duration // DefaultPassTimeout if zero
	SendTimeout time.Duration // DefaultSendTimeout if zero; must be below PassTimeout
	// DrainInterval is how often Start drains the dead-letter queues (Drain), if the queue has
	// them: DefaultDrainInterval if zero, never if negative.
	DrainInterval time.Duration
	// Scheduler creates the tasks of periodic schedules' firings (see schedule.go): the API's
	// frontend.Service, which sends a task due soon to its queue itself, so that a pass fires a
	// schedule a poll interval ahead and its task runs on time. Nil: the consumer creates them in
	// the store, and a pass fires what is due by its start.
	Scheduler Scheduler
	// Metrics, if set, observes every pass over a lambda: how long it took, and whether it failed.
	Metrics PassMetrics
	// SweepAhead is how far ahead of its start a pass enqueues waiting tasks: one due before
	// then goes to its queue now, its message delayed to its run time (task.EnqueueAhead), so
	// that it starts on time rather than at the first pass after it, up to a poll interval late.
	// Zero: a pass enqueues what is due by its start. It should be about the poll interval: what
	// goes ahead takes room under the lambda's cap (task.Lambda.MaxEnqueued) while it waits.
	SweepAhead time.Duration
}

// PassMetrics observes the consumer's passes (metrics.Recorder is one).
type PassMetrics interface {
	Pass(lambda string, took time.Duration, failed bool)
}

// Consumer sweeps the store.
type Consumer struct {
	store       task.Store
	queue       task.Queue
	lambdas     task.Catalog
	cfg         task.Config
	now         func() time.Time
	jitter      func() float64
	log         *slog.Logger
	wake        chan struct{}
	refills     atomic.Pointer[map[string]*refill] // by name, of what Run sweeps; Claimed reads it unlocked
	refilled    chan struct{}                      // a refill is due: see Claimed
	workers     int
	sweepAhead  time.Duration
	passTimeout time.Duration
	sendTimeout time.Duration
	drainEvery  time.Duration
	scheduler   Scheduler
	sendsAhead  bool // scheduler sends tasks ahead: schedules fire a poll interval early
	metrics     PassMetrics
	// drainFrom is the dead-letter queue (an index into every lambda's priorities) the next
	// drain starts with: the first one the last drain did not reach, or 0.
	drainFrom atomic.Int64

	stopOnce sync.Once
	stop     context.CancelFunc
	done     chan struct{}
}

// New returns a Consumer.
func New(store task.Store, queue task.Queue, c Config) *Consumer {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = DefaultPassTimeout
	}
	if c.SendTimeout <= 0 || c.SendTimeout >= c.PassTimeout {
		c.SendTimeout = min(DefaultSendTimeout, c.PassTimeout/2)
	}
	cons := &Consumer{
		store: store, queue: queue, lambdas: c.Lambdas, cfg: c.Task.WithDefaults(),
		now: c.Now, jitter: c.Jitter, log: c.Logger, wake: make(chan struct{}, 1),
		refilled: make(chan struct{}, 1),
		workers:  c.Workers, sweepAhead: max(c.SweepAhead, 0), passTimeout: c.PassTimeout, sendTimeout: c.SendTimeout,
		drainEvery: c.DrainInterval, metrics: c.Metrics,
	}
	if cons.drainEvery == 0 {
		cons.drainEvery = DefaultDrainInterval
	}
	cons.scheduler, cons.sendsAhead = c.Scheduler, c.Scheduler != nil
	if cons.scheduler == nil {
		cons.scheduler = storeScheduler{cons}
	}
	if cons.lambdas == nil {
		cons.lambdas = task.FixedCatalog(nil)
	}
	cons.refills.Store(&map[string]*refill{})
	return cons
}

// refillPart: a lambda held back by its cap is refilled once its workers have claimed this part
// of the cap (an eighth), so its queue stays at least 7/8 full at the cost of one pass per eighth.
const refillPart = 8

// refill tracks a lambda whose last pass Run made was cut by its cap on enqueued tasks.
type refill struct {
	capped  atomic.Bool  // the last pass left due tasks waiting for room
	claimed atomic.Int64 // claims since that pass
	due     atomic.Bool  // enough were claimed: the next pass starts at once
	after   int64        // claims that make a refill due
}

// Claimed tells a running consumer that a task of lambda was claimed, so one fewer is enqueued.
// When the lambda's last pass was cut by its cap (task.Lambda.MaxEnqueued) and its workers have
// since claimed an eighth of the cap, its next pass starts at once rather than at its next poll:
// the cap bounds what waits in the queue, not how fast workers drain it. It costs an atomic add,
// and nothing for a lambda that is not capped.
func (c *Consumer) Claimed(lambda string) {
	r, ok := (*c.refills.Load())[lambda]
	if !ok {
		return
	}
	if !r.capped.Load() || r.claimed.Add(1) < r.after || !r.capped.CompareAndSwap(true, false) {
		return
	}
	r.due.Store(true)
	select {
	case c.refilled <- struct{}{}:
	default:
	}
}

// Stats counts what one sweep did.
type Stats struct {
	Enqueued, TimedOut, Dead, Dropped int
	// Parked and Unparked count tasks set aside while a gate holds their collection, and put
	// back once it opens.
	Parked, Unparked int
	// Capped counts due tasks left waiting because their lambda had its most tasks enqueued
	// (task.Lambda.MaxEnqueued).
	Capped int
	// Unblocked counts pending tasks whose upstreams all ended (now new), and UpstreamFailed
	// those ended because an upstream did not succeed (see flow.go).
	Unblocked, UpstreamFailed int
	// Full reports that a lambda used its whole enqueue quota: more of its tasks may be due.
	Full bool
	// Seen counts the tasks (and schedules) a pass's reads returned, moved or not: a pass that
	// saw none found its lambda idle.
	Seen int
	// Fired counts the tasks periodic schedules created; FiringsSkipped the firings that made
	// none (overlap skip while the previous firing's task runs, or a template refused).
	Fired, FiringsSkipped int
}

func (s *Stats) add(o Stats) {
	s.Enqueued += o.Enqueued
	s.TimedOut += o.TimedOut
	s.Dead += o.Dead
	s.Dropped += o.Dropped
	s.Parked += o.Parked
	s.Unparked += o.Unparked
	s.Capped += o.Capped
	s.Unblocked += o.Unblocked
	s.UpstreamFailed += o.UpstreamFailed
	s.Full = s.Full || o.Full
	s.Seen += o.Seen
	s.Fired += o.Fired
	s.FiringsSkipped += o.FiringsSkipped
}

// Wake makes a running consumer sweep now rather than at its next poll, as when a task was just
// scheduled or a gate changed.
func (c *Consumer) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start runs the consumer (see Run) until Stop.
func (c *Consumer) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx, RunParams{}) })
	if _, ok := c.queue.(task.DeadLetterQueue); ok && c.drainEvery > 0 {
		wg.Go(func() { c.drainLoop(ctx) })
	}
	go func() {
		defer close(c.done)
		wg.Wait()
	}()
}

// Stop ends the sweeps and waits for the current passes. A second Stop is a no-op.
func (c *Consumer) Stop() {
	c.stopOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.done
		}
	})
}

// Sweep makes one pass over every lambda, at most Workers lambdas at once, each within its pass
// timeout, and returns once every pass has ended.
func (c *Consumer) Sweep(ctx context.Context) (Stats, error) {
	lambdas, err := c.lambdas.Lambdas(ctx)
	if err != nil {
		return Stats{}, err
	}
	gates, err := c.store.Gates(ctx)
	if err != nil {
		return Stats{}, err
	}
	stats := make([]Stats, len(lambdas))
	errs := make([]error, len(lambdas))
	slots := make(chan struct{}, c.workers)
	var wg sync.WaitGroup
	for i, l := range lambdas {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			stats[i], _, errs[i] = c.pass(ctx, l, func(context.Context) ([]task.Gate, error) { return gates, nil }, true)
		})
	}
	wg.Wait()
	var st Stats
	for _, s := range stats {
		st.add(s)
	}
	return st, errors.Join(errs...)
}

// RunParams says how Run paces its passes.
type RunParams struct {
	// Interval is the time between the starts of two passes of a lambda: the poll interval if zero.
	Interval time.Duration
	// Until, if set, is when Run starts no more passes; each lambda gets one pass at least.
	Until time.Time
	// StopWhenIdle, with Until, ends a lambda's passes as soon as nothing of it is due soon: once
	// a pass of it saw no task, and no lane of it holds a task due before Until (see idleUntil).
	// A lambda with something due before Until keeps its passes an interval apart, so what comes
	// due, and what its tasks set off meanwhile (a downstream to tell, a task scheduled), waits no
	// longer than while the consumer runs for good. The consumer function sets it: EventBridge
	// starts it again within the minute, and an idle environment then pays for one pass of each
	// lambda a minute and one look ahead, rather than a minute of passes.
	StopWhenIdle bool
}

// RunStats sums up what Run did.
type RunStats struct {
	Stats
	Passes, Failed int
	// Looks counts the looks ahead of StopWhenIdle; Stopped the lambdas it stopped early.
	Looks, Stopped int
	Err            error // of the last pass that failed
}

// Run sweeps every lambda on a schedule of its own until ctx ends or p.Until passes. A lambda's
// next pass starts an interval after its last one started, at once if that one used the whole
// quota (a backlog), or when woken, or when its workers claimed enough of what its cap held back
// (Claimed); whatever the other lambdas do. A slow lambda thus delays no
// other; at most Workers passes run at once. Passes that start together share one read of the
// gates. Run returns once its last passes have ended.
func (c *Consumer) Run(ctx context.Context, p RunParams) RunStats {
	if p.Interval <= 0 {
		p.Interval = c.cfg.PollInterval
	}
	stopWhenIdle := p.StopWhenIdle && !p.Until.IsZero()
	type state struct {
		lambda task.Lambda
		gone   bool // no longer listed: dropped once its pass in flight ends
		busy   bool
		passes int
		next   time.Time // when the next pass may start
		done   bool      // StopWhenIdle: nothing of it is due before p.Until
		awake  time.Time // StopWhenIdle: something is due by then; no need to look again before
		saw    bool      // its last pass saw tasks: the next one reads its lanes without asking
	}
	type result struct {
		s      *state
		st     Stats
		err    error
		looked bool
		idle   bool      // the pass saw nothing, and nothing is due before p.Until
		due    time.Time // the earliest trigger the look found
	}
	// The lambdas swept: states by name, and their names in order. Run lists the catalog every
	// interval, in the background so that a slow catalog holds up no pass, and follows its
	// changes (follow): a lambda that goes keeps nothing here once its pass in flight ends.
	states := map[string]*state{}
	var order []string
	follow := func(ls []task.Lambda) {
		order = order[:0]
		listed := make(map[string]bool, len(ls))
		for _, l := range ls {
			listed[l.Name] = true
			order = append(order, l.Name)
			if s, ok := states[l.Name]; ok {
				s.lambda, s.gone = l, false // new settings take effect at its next pass
			} else {
				states[l.Name] = &state{lambda: l}
			}
		}
		for name, s := range states {
			if !listed[name] {
				if s.busy {
					s.gone = true
				} else {
					delete(states, name)
				}
			}
		}
		c.followRefills(ls)
	}
	knew := true
	apply := func(l listing) {
		switch {
		case l.err == nil:
			follow(l.lambdas)
			knew = true
		case knew && ctx.Err() == nil:
			// Logged once an outage: a catalog may keep serving what it read last for a while
			// (package ssmcatalog), so this is a longer outage, or one since start-up.
			c.log.Error("the lambdas are unknown: sweeping those listed last", "lambdas", len(order), "err", l.err)
			knew = false
		}
	}
	apply(c.list(ctx))              // at once, so that each lambda gets its pass even past p.Until
	listed := make(chan listing, 1) // buffered: a listing that ends after Run returns
	listing, nextList := false, time.Now().Add(p.Interval)
	done := make(chan result)
	running := 0
	var total RunStats
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	revive := func() {
		for _, s := range states {
			s.next, s.done = time.Time{}, false
		}
	}
	for {
		now := time.Now()
		over := !p.Until.IsZero() && !now.Before(p.Until)
		wait := time.Duration(-1)
		if !listing && !over && ctx.Err() == nil {
			if d := nextList.Sub(now); d > 0 {
				wait = d
			} else {
				listing, nextList = true, now.Add(p.Interval)
				go func() { listed <- c.list(ctx) }()
			}
		}
		var gates func(context.Context) ([]task.Gate, error) // shared by the passes started now
		for _, name := range order {
			s := states[name]
			if s.busy || s.done || ctx.Err() != nil || (over && s.passes > 0) || running == c.workers {
				continue
			}
			if d := s.next.Sub(now); d > 0 {
				if wait < 0 || d < wait {
					wait = d
				}
				continue
			}
			s.busy, s.passes, s.next = true, s.passes+1, now.Add(p.Interval)
			running++
			if gates == nil {
				gates = c.sharedGates()
			}
			look := stopWhenIdle && !now.Before(s.awake)
			probe := !s.saw
			l := s.lambda
			go func() {
				r := result{s: s}
				var untriggered bool
				r.st, untriggered, r.err = c.pass(ctx, l, gates, probe)
				if look && r.err == nil && r.st.Seen == 0 {
					r.looked = true
					r.due, r.err = c.idleUntil(ctx, l, gates, p.Until, untriggered)
					r.idle = r.err == nil && r.due.IsZero()
				}
				done <- r
			}()
		}
		if running == 0 && (ctx.Err() != nil || over || allDone(order, func(name string) bool { return states[name].done })) {
			return total
		}
		var tick <-chan time.Time
		if wait >= 0 && !over {
			timer.Reset(wait)
			tick = timer.C
		}
		var stop <-chan struct{}
		if ctx.Err() == nil {
			stop = ctx.Done()
		}
		select {
		case l := <-listed:
			listing = false
			apply(l)
		case r := <-done:
			running--
			s := r.s
			s.busy, s.saw = false, r.st.Seen > 0
			if s.gone {
				delete(states, s.lambda.Name)
			}
			total.Passes++
			total.add(r.st)
			if r.looked {
				// Look again once that is due, and not before a few more passes: a look costs
				// about what a pass does.
				total.Looks++
				s.awake = later(r.due, time.Now().Add(lookSpacing*p.Interval))
			}
			if r.idle {
				s.done = true
				total.Stopped++
			}
			if r.st.Full {
				s.next = time.Time{} // a backlog: its next pass at once
			}
			if r.st.Unblocked+r.st.UpstreamFailed > 0 {
				// Tasks of any lambda may have become due, or ended with downstreams to tell.
				revive()
			}
			if refill, ok := (*c.refills.Load())[s.lambda.Name]; ok {
				refill.claimed.Store(0)
				refill.capped.Store(r.st.Capped > 0 && !r.st.Full)
			}
			if r.err != nil {
				total.Failed++
				total.Err = r.err
				if ctx.Err() == nil {
					c.log.Error("sweep failed", "lambda", s.lambda.Name, "err", r.err)
				}
			}
		case <-tick:
		case <-c.wake:
			revive()
		case <-c.refilled:
			refills := *c.refills.Load()
			for name, s := range states {
				if r, ok := refills[name]; ok && r.due.Swap(false) {
					s.next, s.done = time.Time{}, false
				}
			}
		case <-stop:
		}
	}
}

// listing is what one read of the catalog returned.
type listing struct {
	lambdas []task.Lambda
	err     error
}

// list reads the lambdas to sweep, within a pass's time.
func (c *Consumer) list(ctx context.Context) listing {
	ctx, cancel := context.WithTimeout(ctx, c.passTimeout)
	defer cancel()
	ls, err := c.lambdas.Lambdas(ctx)
	return listing{ls, err}
}

// followRefills makes the refills those of ls: a lambda keeps its own while its cap stays the
// same, a new one or one with a new cap gets a fresh one, and one that went loses it.
func (c *Consumer) followRefills(ls []task.Lambda) {
	old := *c.refills.Load()
	refills := make(map[string]*refill, len(ls))
	same := len(old) == len(ls)
	for _, l := range ls {
		after := int64(max(1, l.EnqueuedCap(c.cfg)/refillPart))
		if r, ok := old[l.Name]; ok && r.after == after {
			refills[l.Name] = r
			continue
		}
		refills[l.Name] = &refill{after: after}
		same = false
	}
	if !same {
		c.refills.Store(&refills)
	}
}

// lookSpacing is the fewest passes between two looks ahead of one lambda.
const lookSpacing = 5

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func allDone[S any](states []S, done func(S) bool) bool {
	for _, s := range states {
		if !done(s) {
			return false
		}
	}
	return len(states) > 0
}

// sharedGates returns a read of the gates that the passes starting now share: the first to ask
// reads them, within a pass's deadline, and the others wait for that read. A pass needs the gates
// as they were when it began (it reads them again after any waiting task it found, see
// sweepLambda), so passes that begin together need one read between them.
func (c *Consumer) sharedGates() func(context.Context) ([]task.Gate, error) {
	var once sync.Once
	var gates []task.Gate
	var err error
	return func(ctx context.Context) ([]task.Gate, error) {
		once.Do(func() { gates, err = c.store.Gates(ctx) })
		return gates, err
	}
}

// idleUntil looks ahead for StopWhenIdle: the earliest trigger before until (a wall-clock time)
// of a task in a lane of l that a pass reads, or zero if there is none. A task in flight (running,
// or enqueued, as the schedule path sends tasks due within 15 minutes) counts as due now whatever
// its trigger: its end may set off at once what only a pass handles (its downstreams to tell, a
// retry the status controller could not send). Parked tasks, and the waiting and enqueued tasks
// of a lambda whose gate is not open, wait for a gate to open: an idle consumer sees that open at
// its next start. It reads one task of a lane at most, and stops at the first lane with one. After
// a pass that found no task triggered (untriggered), it reads the schedules alone.
func (c *Consumer) idleUntil(ctx context.Context, l task.Lambda, gates func(context.Context) ([]task.Gate, error), until time.Time, untriggered bool) (time.Time, error) {
	work, _ := c.deadlines(ctx)
	ctx, cancel := context.WithDeadline(ctx, work)
	defer cancel()
	before := c.now().UTC().Add(time.Until(until))
	// A schedule fires whatever the gates: its next firing, less the lead, keeps the lambda awake.
	due, err := c.store.DueSchedules(ctx, l.Name, before.Add(c.scheduleLead()), 1)
	if err != nil {
		return time.Time{}, err
	}
	if len(due) > 0 {
		return time.Now().Add(due[0].NextFire.Add(-c.scheduleLead()).Sub(c.now())), nil
	}
	if untriggered {
		return time.Time{}, nil
	}
	g, err := gates(ctx) // the pass's read, shared
	if err != nil {
		return time.Time{}, err
	}
	lanes := []task.DueParams{{Statuses: task.Running, Before: endOfTime}, {Statuses: flowing}}
	if mode, _, _ := gatesOf(l.Name, g); mode == task.GateOpen {
		lanes = append(lanes, task.DueParams{Statuses: []task.Status{task.StatusEnqueued}, Before: endOfTime})
		for _, p := range l.Priorities {
			lanes = append(lanes, task.DueParams{Priority: p, Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}})
		}
	}
	for _, lane := range lanes {
		inFlight := !lane.Before.IsZero()
		if !inFlight {
			lane.Before = before
		}
		lane.Lambda, lane.Limit = l.Name, 1
		found, err := c.store.Due(ctx, lane)
		if err != nil {
			return time.Time{}, err
		}
		switch {
		case len(found) == 0 || found[0].NextTriggerAt == nil:
		case inFlight:
			return time.Now(), nil
		default:
			// The wall-clock time of its trigger, as Run keeps time.
			return time.Now().Add(found[0].NextTriggerAt.Sub(c.now())), nil
		}
	}
	return time.Time{}, nil
}

// deadlines returns when a pass starting now must end its reads and writes (work), and when its
// sends must end at the latest (hard): within the pass timeout and before ctx's own deadline,
// with the send timeout kept for the sends.
func (c *Consumer) deadlines(ctx context.Context) (work, hard time.Time) {
	hard = time.Now().Add(c.passTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(hard) {
		hard = d
	}
	return hard.Add(-c.sendTimeout), hard
}

// pass sweeps one lambda within the pass timeout. gates reads the gates as they were when the pass
// began: a read that a sweep of every lambda shares. With probe, the pass first asks whether the
// lambda has a task triggered at all (worth it unless its last pass saw tasks); untriggered
// reports that it had none, and no schedule due: the pass read nothing else.
func (c *Consumer) pass(ctx context.Context, l task.Lambda, gates func(context.Context) ([]task.Gate, error), probe bool) (st Stats, untriggered bool, err error) {
	workBy, hard := c.deadlines(ctx)
	work, cancel := context.WithDeadline(ctx, workBy)
	defer cancel()
	s := &passState{Consumer: c, ctx: ctx, hard: hard, probe: probe}
	started := time.Now()
	// The pass's moves are counted summed, one counter write per item they touch, when it ends
	// (its enqueues before their messages go, see move): before the next pass of the lambda reads
	// the counts for its room.
	work, flush := task.GatherCounts(work, c.store)
	err = s.sweepLambda(work, l, gates)
	flush()
	if c.metrics != nil {
		c.metrics.Pass(l.Name, time.Since(started), err != nil)
	}
	return s.st, s.untriggered, err
}

// passState is one pass of one lambda.
type passState struct {
	*Consumer
	ctx   context.Context // the caller's: sends outlive its cancellation, not its deadline
	hard  time.Time       // the pass's deadline, the sends' included
	mu    sync.Mutex      // guards st where a pass writes in parallel
	st    Stats
	probe bool // ask Store.Triggered before reading the lanes
	// untriggered: the lambda had no task with a trigger, and no schedule due.
	untriggered bool
}

func (c *passState) sweepLambda(ctx context.Context, l task.Lambda, readGates func(context.Context) ([]task.Gate, error)) error {
	st := &c.st
	now := c.now().UTC()
	// A lambda without a task triggered has nothing in any lane: one entry read per shard
	// instead of every lane's, and no gates, which an idle environment would pay for each
	// lambda, lane and shard (docs/capacity.md). Its schedules fire all the same; a schedule
	// due takes the whole pass, which enqueues what the firing made. A lambda whose last pass saw
	// tasks is not asked: it is busy, and the question would add S reads to each of its passes.
	triggered := true
	if c.probe {
		var err error
		if triggered, err = c.store.Triggered(ctx, l.Name); err != nil {
			return err
		}
	}
	if !triggered {
		if err := c.fireSchedules(ctx, l, now); err != nil || st.Seen == 0 {
			c.untriggered = err == nil
			return err
		}
	}
	gates, err := readGates(ctx)
	if err != nil {
		return err
	}
	mode, held, dropped := gatesOf(l.Name, gates)

	// Workers that went silent: their tasks fail the attempt, whatever the gate.
	stalled, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: task.Running, Before: now, Limit: c.cfg.EnqueueQuota})
	if err != nil {
		return err
	}
	st.Seen += len(stalled)
	var retries []task.Message // sent ahead: the retries due within task.MaxSendAhead
	for _, t := range stalled {
		var msg *task.Message
		next, err := c.apply(ctx, t, func(t task.Task) (task.Task, error) {
			next, err := task.Timeout(t, now, l.Config(c.cfg), c.jitter()) // with its lambda's backoff
			if err != nil || next.Status != task.StatusRetriableFailure || mode != task.GateOpen || slices.Contains(held, t.Collection) {
				return next, err
			}
			if enq, m, err := task.RetryAhead(next, now, c.cfg); err == nil {
				next, msg = enq, &m
			}
			return next, nil
		})
		if msg != nil && (err == nil || !task.Refused(err)) {
			retries = append(retries, *msg) // the write may have landed: a message too many fails its claim
		}
		if err != nil {
			continue
		}
		st.TimedOut++
		if next.Status == task.StatusDead {
			st.Dead++
		}
		if next.Status == task.StatusCancelled {
			// Its cancel was accepted while it ran: it ends cancelled, never retried.
			c.log.Info("cancelled task timed out; ended cancelled", "lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
			continue
		}
		c.log.Warn("worker lost; task will run again", "lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts, "status", next.Status)
	}
	c.sendAhead(retries, now)
	if err := c.flows(ctx, l, now); err != nil {
		return err
	}
	if triggered { // else fired above
		if err := c.fireSchedules(ctx, l, now); err != nil {
			return err
		}
	}

	switch mode {
	case task.GateDrop:
		return c.dropAll(ctx, l, now, st)
	case task.GatePause:
		return nil
	}
	for _, coll := range dropped {
		if err := c.dropParked(ctx, l.Name, coll, now, st); err != nil {
			return err
		}
	}
	if err := c.unpark(ctx, l.Name, held, now, st); err != nil {
		return err
	}

	quota := c.cfg.EnqueueQuota
	defer func() { st.Full = st.Full || quota == 0 }()

	// Enqueued tasks whose message may be lost, of every priority: their lane holds nothing
	// else, so no backlog of waiting tasks is ahead of them. A resend adds nothing in flight, so
	// the lambda's cap never holds one back. A task scheduled after its gate closed is not among
	// them (it was enqueued by a pass that saw no gate): a resend of one enqueued before meets the
	// gate as its first message would have, and a held collection's is parked.
	resends, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: []task.Status{task.StatusEnqueued}, Before: now, Limit: quota})
	if err != nil {
		return err
	}
	st.Seen += len(resends)
	if err := c.move(ctx, resends, held, dropped, now, &quota); err != nil {
		return err
	}

	room := roomUnknown // how many more tasks may be enqueued: read when first needed
	waiting := []task.Status{task.StatusNew, task.StatusRetriableFailure}
	for _, p := range l.Priorities {
		if quota == 0 {
			break
		}
		// Tasks of held collections are read too, and parked (or dropped) below: the range
		// never holds more of them than one quota.
		due, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Priority: p, Statuses: waiting, Before: now.Add(c.sweepAhead), Limit: quota})
		if err != nil {
			return err
		}
		if len(due) == 0 {
			continue
		}
		st.Seen += len(due)
		// Read the gates again after the tasks: a task scheduled after its gate closed must see
		// that gate, even when this sweep began before the gate changed. Without a task, there is
		// nothing for a gate to hold: an idle priority reads no gates.
		if gates, err = c.store.Gates(ctx); err != nil {
			return err
		}
		if mode, held, dropped = gatesOf(l.Name, gates); mode != task.GateOpen {
			return nil
		}
		if due, err = c.admit(ctx, l, due, held, &room, now); err != nil {
			return err
		}
		if err := c.move(ctx, due, held, dropped, now, &quota); err != nil {
			return err
		}
	}
	return nil
}

// move enqueues (or parks, or drops) due and sends the messages of those enqueued, taking what
// it moved from quota. Higher priorities go first, and within one the earliest due. Each chunk's
// messages go out as soon as its writes are done, so a pass cut short has at most one chunk to
// send.
func (c *passState) move(ctx context.Context, due []task.Task, held, dropped []string, now time.Time, quota *int) error {
	size := enqueueWriters
	if task.Batched(c.store) {
		size = enqueueBatch
	}
	for chunk := range slices.Chunk(due, size) {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The chunk's moves are counted before its messages go: no claim of a task enqueued here
		// can take it out of the counts before its enqueue is in them.
		gathered, flush := task.GatherCounts(ctx, c.store)
		moved, aside := c.enqueue(gathered, chunk, held, dropped, now)
		flush()
		*quota -= len(moved) + aside
		var sends []task.Task
		for _, next := range moved {
			if next.Status == task.StatusDead {
				c.st.Dead++
				continue
			}
			sends = append(sends, next)
		}
		if err := c.send(sends, now); err != nil {
			return err
		}
	}
	return nil
}

// roomUnknown marks a pass's room before it has read the lambda's counts.
const roomUnknown = -1

// inFlightGrace is how long a due task may be left waiting by the lambda's cap on enqueued tasks
// before it is enqueued whatever the counts say: a safety net for counts that drifted far above
// the truth (DynamoDB's counters can, see docs/capacity.md), which would otherwise shrink the
// lambda's room for good. It equals the longest wait of an enqueued task between two resends
// (task.MaxEnqueueWait).
const inFlightGrace = task.MaxEnqueueWait

// admit keeps of due, the waiting (not yet enqueued) tasks of one priority, those this pass may
// move: every task of a held collection (parked or dropped, not sent), and the others that fit
// in the lambda's room, earliest first, or have waited past the grace. The room is read from the
// lambda's counts on the first task that needs it, so a pass that enqueues nothing reads none.
// The others wait in the store for a later pass.
func (c *passState) admit(ctx context.Context, l task.Lambda, due []task.Task, held []string, room *int, now time.Time) ([]task.Task, error) {
	kept := due[:0:0]
	for _, t := range due {
		if !slices.Contains(held, t.Collection) {
			if *room == roomUnknown {
				counts, err := c.store.Counts(ctx, l.Name)
				if err != nil {
					return nil, err
				}
				// A count that drifted below zero counts as none.
				*room = max(l.EnqueuedCap(c.cfg)-max(counts[task.StatusEnqueued], 0), 0)
			}
			switch {
			case t.NextTriggerAt != nil && t.NextTriggerAt.After(now):
				// Swept ahead (SweepAhead): only while half the cap stays free for tasks due
				// now, as the schedule path sends ahead; otherwise it waits for its time.
				if *room <= l.EnqueuedCap(c.cfg)/2 {
					continue
				}
				*room--
			case *room > 0:
				*room--
			case t.NextTriggerAt != nil && now.Sub(*t.NextTriggerAt) >= inFlightGrace:
			default:
				c.st.Capped++
				continue
			}
		}
		kept = append(kept, t)
	}
	return kept, nil
}

// enqueueWriters is how many enqueue writes a pass has in flight at once, and how many tasks'
// messages it sends together (two SQS batches). Each write is a round trip (a conditional
// PutItem, or a commit of the embedded store); one at a time they would cap a lambda at a few
// hundred enqueues a second (docs/capacity.md).
const enqueueWriters = 20

// enqueueBatch is how many enqueues a pass writes together on a store that writes many in one
// commit (task.BatchUpdater), and how many tasks' messages it then sends together.
const enqueueBatch = 100

// enqueue moves the due tasks that no gate holds to enqueued (or dead, past their deadline), all
// at once, and returns the moved tasks in due's order: earliest first. A write whose outcome is
// unknown (an error other than a refusal, a deadline included) counts as moved: its message is
// sent all the same, since a message for a task that is not enqueued only fails its claim, while
// no message for one that is would leave it to the enqueue timeout. A task that a gate holds is
// parked, out of the sweep's range, or dropped if its gate drops; aside counts them.
func (c *passState) enqueue(ctx context.Context, due []task.Task, held, dropped []string, now time.Time) (out []task.Task, aside int) {
	if task.Batched(c.store) {
		return c.enqueueBatch(ctx, c.store.(task.BatchUpdater), due, held, dropped, now)
	}
	moved := make([]*task.Task, len(due))
	var parked, gone atomic.Int64
	var wg sync.WaitGroup
	for i, t := range due {
		move := func(t task.Task) (task.Task, error) { return c.enqueueDue(t, now) }
		count := (*atomic.Int64)(nil)
		switch {
		case slices.Contains(dropped, t.Collection):
			move, count = func(t task.Task) (task.Task, error) { return task.Drop(t, now) }, &gone
			aside++
		case slices.Contains(held, t.Collection):
			move, count = func(t task.Task) (task.Task, error) { return task.Park(t, now) }, &parked
			aside++
		}
		wg.Go(func() {
			next, err := c.apply(ctx, t, move)
			switch {
			case count != nil:
				if err == nil {
					count.Add(1)
				}
			case err == nil || !refused(err):
				moved[i] = &next
			}
		})
	}
	wg.Wait()
	c.st.Parked += int(parked.Load())
	c.st.Dropped += int(gone.Load())
	for _, t := range moved {
		if t != nil {
			out = append(out, *t)
		}
	}
	return out, aside
}

// enqueueBatch is enqueue on a store that writes many updates in one commit: every transition
// of due goes in one UpdateMany, each still conditional on the version the sweep read.
func (c *passState) enqueueBatch(ctx context.Context, b task.BatchUpdater, due []task.Task, held, dropped []string, now time.Time) (out []task.Task, aside int) {
	type write struct {
		next task.Task
		set  bool // moved to enqueued (or dead): its message is sent
		gone bool // dropped, not parked
	}
	var (
		ws     []task.Versioned
		writes []write
	)
	for _, t := range due {
		var next task.Task
		var err error
		w := write{}
		switch {
		case slices.Contains(dropped, t.Collection):
			next, err = task.Drop(t, now)
			w.gone = true
			aside++
		case slices.Contains(held, t.Collection):
			next, err = task.Park(t, now)
			aside++
		default:
			next, err = c.enqueueDue(t, now)
			w.set = true
		}
		if err != nil {
			if !refused(err) {
				c.log.Warn("could not move task", "lambda", t.Lambda, "task_id", t.ID, "err", err)
			}
			continue
		}
		w.next = next
		ws = append(ws, task.Versioned{Task: next, Prev: t.Version})
		writes = append(writes, w)
	}
	for i, err := range b.UpdateMany(ctx, ws) {
		w := writes[i]
		if err != nil && !errors.Is(err, task.ErrConflict) {
			c.log.Warn("could not move task", "lambda", w.next.Lambda, "task_id", w.next.ID, "err", err)
		}
		switch {
		case !w.set:
			if err == nil && w.gone {
				c.st.Dropped++
			} else if err == nil {
				c.st.Parked++
			}
		case err == nil || !refused(err):
			out = append(out, w.next)
		}
	}
	return out, aside
}

// enqueueDue enqueues t: at once if it is due, or ahead of its run time if it is due within the
// sweep-ahead (its message is delayed to it: Task.MessageAt).
func (c *passState) enqueueDue(t task.Task, now time.Time) (task.Task, error) {
	if c.sweepAhead > 0 && t.Status != task.StatusEnqueued && t.NextTriggerAt != nil && t.NextTriggerAt.After(now) {
		next, _, err := task.EnqueueAhead(t, now, c.cfg)
		return next, err
	}
	return task.Enqueue(t, now, c.cfg)
}

// refused reports whether a transition's error says that it did not happen.
func refused(err error) bool {
	return errors.Is(err, task.ErrConflict) || errors.Is(err, task.ErrNotDue)
}

// send puts the messages of tasks just moved to enqueued on their queues, within the pass's
// deadline even when the pass was cancelled. A failed send is tried again after a moment. If it
// fails again, each task is made due again after a poll interval (task.Unsent), so that the next
// pass sends it rather than the enqueue timeout, and the pass ends: the queue is failing.
func (c *passState) send(moved []task.Task, now time.Time) error {
	if len(moved) == 0 {
		return nil
	}
	msgs := make([]task.Message, len(moved))
	for i, t := range moved {
		msgs[i] = t.MessageAt(now) // delayed to its NotBefore, for a resend of a task sent ahead
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(c.ctx), c.hard)
	defer cancel()
	err := c.queue.Send(ctx, msgs...)
	if err != nil && sleep(ctx, sendRetryDelay) {
		err = c.queue.Send(ctx, msgs...)
	}
	if err == nil {
		c.st.Enqueued += len(msgs)
		return nil
	}
	c.log.Warn("could not send messages; their tasks are due again soon", "lambda", moved[0].Lambda, "tasks", len(moved), "err", err)
	// The pass's time may be up: these writes get the send timeout of their own.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.sendTimeout)
	defer wcancel()
	var wg sync.WaitGroup
	for _, t := range moved {
		wg.Go(func() {
			_, _ = c.apply(wctx, t, func(t task.Task) (task.Task, error) { return task.Unsent(t, now, c.cfg) })
		})
	}
	wg.Wait()
	return err
}

// sendAhead sends the messages of retries enqueued ahead (task.EnqueueAhead) within the pass's
// deadline; if that fails, their tasks are due again after a poll interval, as in send.
func (c *passState) sendAhead(msgs []task.Message, now time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(c.ctx), c.hard)
	defer cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.sendTimeout)
	defer wcancel()
	if err := task.SendOrUnsent(ctx, wctx, c.queue, c.store, msgs, now, c.cfg); err != nil {
		c.log.Warn("could not send retries; their tasks are due again soon", "lambda", msgs[0].Lambda, "tasks", len(msgs), "err", err)
	}
}

// sleep waits for d; it reports false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// endOfTime is after every trigger: a drop takes waiting tasks whenever they are due.
var endOfTime = time.Unix(0, math.MaxInt64)

// dropAll ends a dropped lambda's waiting tasks, due or not, parked or not: up to a quota per
// sweep, read from the due index's waiting lanes, the enqueued tasks' lane and the parked lane,
// which hold nothing else.
func (c *Consumer) dropAll(ctx context.Context, l task.Lambda, now time.Time, st *Stats) error {
	quota := c.cfg.EnqueueQuota
	notEnqueued := slices.DeleteFunc(slices.Clone(task.Waiting), func(s task.Status) bool { return s == task.StatusEnqueued })
	lanes := make([]task.DueParams, 0, len(l.Priorities)+2)
	for _, p := range l.Priorities {
		lanes = append(lanes, task.DueParams{Priority: p, Statuses: notEnqueued})
	}
	lanes = append(lanes, task.DueParams{Statuses: []task.Status{task.StatusEnqueued}}, task.DueParams{Parked: true, Statuses: task.Waiting})
	for _, lane := range lanes {
		if quota == 0 {
			st.Full = true
			return nil
		}
		lane.Lambda, lane.Before, lane.Limit = l.Name, endOfTime, quota
		n, err := c.each(ctx, lane, st, func(t task.Task) (task.Task, error) { return task.Drop(t, now) })
		st.Dropped += n
		quota -= n
		if err != nil {
			return err
		}
	}
	st.Full = st.Full || quota == 0
	return nil
}

// dropParked ends the parked tasks of a dropped collection, up to a quota per sweep. Its tasks
// still in the waiting lanes are dropped as the sweep meets them, once due.
func (c *Consumer) dropParked(ctx context.Context, lambda, collection string, now time.Time, st *Stats) error {
	n, err := c.each(ctx, task.DueParams{
		Lambda: lambda, Parked: true, Collection: collection, Statuses: task.Waiting, Before: endOfTime, Limit: c.cfg.EnqueueQuota,
	}, st, func(t task.Task) (task.Task, error) { return task.Drop(t, now) })
	st.Dropped += n
	st.Full = st.Full || n == c.cfg.EnqueueQuota
	return err
}

// unpark puts parked tasks whose gate no longer holds them back in their lanes, up to a quota per
// sweep. The store skips a held collection at the cost of one entry.
func (c *Consumer) unpark(ctx context.Context, lambda string, held []string, now time.Time, st *Stats) error {
	n, err := c.each(ctx, task.DueParams{
		Lambda: lambda, Parked: true, SkipCollections: held, Statuses: task.Waiting, Before: endOfTime, Limit: c.cfg.EnqueueQuota,
	}, st, func(t task.Task) (task.Task, error) { return task.Unpark(t, now) })
	st.Unparked += n
	st.Full = st.Full || n == c.cfg.EnqueueQuota
	return err
}

// each applies fn to the tasks p selects and returns how many it moved; st counts those it saw.
func (c *Consumer) each(ctx context.Context, p task.DueParams, st *Stats, fn func(task.Task) (task.Task, error)) (int, error) {
	tasks, err := c.store.Due(ctx, p)
	if err != nil {
		return 0, err
	}
	st.Seen += len(tasks)
	n := 0
	for _, t := range tasks {
		if _, err := c.apply(ctx, t, fn); err == nil {
			n++
		}
	}
	return n, nil
}

// apply writes one transition of a task as the sweep read it. A conflict means someone else
// moved the task meanwhile, and a transition error that the due entry was stale: both are
// skipped quietly, the task is looked at again when it is next due.
func (c *Consumer) apply(ctx context.Context, t task.Task, fn func(task.Task) (task.Task, error)) (task.Task, error) {
	next, err := fn(t)
	if err == nil {
		err = c.store.Update(ctx, next, t.Version)
	}
	if err != nil && !errors.Is(err, task.ErrConflict) && !errors.Is(err, task.ErrNotDue) {
		c.log.Warn("could not move task", "lambda", t.Lambda, "task_id", t.ID, "err", err)
	}
	return next, err
}

// gatesOf returns the gate mode of a lambda, the collections to hold back and those to drop.
func gatesOf(lambda string, gates []task.Gate) (mode string, held, dropped []string) {
	mode = task.GateOpen
	for _, g := range gates {
		switch {
		case g.Lambda != lambda:
		case g.Collection == "":
			mode = g.Mode
		case g.Mode == task.GateDrop:
			dropped = append(dropped, g.Collection)
			held = append(held, g.Collection)
		case g.Mode == task.GatePause:
			held = append(held, g.Collection)
		}
	}
	slices.Sort(held)
	return mode, held, dropped
}

// Recover makes every task left enqueued, claimed or processing due now. Call it at start-up
// when the queue and the executors are known to have died with the previous process (as with
// the in-memory queue of `atf dev`): the next sweep re-runs those tasks at once instead of after
// their timeouts.
func (c *Consumer) Recover(ctx context.Context) (int, error) {
	n := 0
	now := c.now().UTC()
	lambdas, err := c.lambdas.Lambdas(ctx)
	if err != nil {
		return 0, err
	}
	for _, l := range lambdas {
		for _, s := range []task.Status{task.StatusEnqueued, task.StatusClaimed, task.StatusProcessing} {
			cursor := ""
			for {
				tasks, next, err := c.store.List(ctx, task.ListParams{Lambda: l.Name, Status: s, Limit: task.MaxListLimit, Cursor: cursor})
				if err != nil {
					return n, err
				}
				for _, t := range tasks {
					if _, err := c.apply(ctx, t, func(t task.Task) (task.Task, error) { return task.Expire(t, now) }); err == nil {
						n++
					}
				}
				if next == "" {
					break
				}
				cursor = next
			}
		}
	}
	return n, nil
}
