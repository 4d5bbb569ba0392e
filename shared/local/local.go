// Package local runs the whole framework in one process: the HTTP API, the store consumer, the
// status controller, and a controller with its executors per lambda. By default it keeps tasks in
// the embedded store and messages in memory; given a Store and a Queue (DynamoDB and SQS) it runs
// the same services on them. It is what `atf dev` starts, and what end-to-end tests start
// in-process.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openatf/atf/shared/adapter/dashboard"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/adapter/prommetrics"
	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/controller"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/service/taskend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Config configures a local stack.
type Config struct {
	Addr   string // listen address, such as 127.0.0.1:8080; port 0 picks a free one
	DBPath string // the SQLite file, when Store is nil; its folder is created
	// Retention is how long the embedded store keeps a finished task after its last write
	// (sqlitestore.DefaultRetention if zero, forever if negative); see sqlitestore.Options.
	Retention time.Duration
	// Store and Queue replace the embedded store and the in-memory queue, together. Their
	// messages and tasks outlive the process, so nothing is recovered at start: timeouts bring
	// back what a crash left in flight. Stop does not close them.
	Store task.Store
	Queue task.Queue
	// Functions runs the AWS function handlers instead of the in-process services; it needs
	// Store and Queue on DynamoDB and SQS.
	Functions *Functions
	// IdleWait is how long a controller long-polls when its queues are empty; see controller.Config.
	IdleWait    time.Duration
	Mux         *worker.Mux // Go handlers by name; Start does not change it
	HandlersDir string      // executable files, each a handler named after the file; optional
	// Registry, if set, declares the lambdas as the stacks deploy them: its entries alone are
	// served, each running its handler (Entry.Handler, a program of HandlersDir or a Go handler
	// of Mux) with the entry's priorities, concurrency, timeout and attempts. An entry whose
	// handler is missing fails Start; a handler no entry runs is not served, and Start logs a
	// warning naming it. Without a Registry every handler is a lambda of the same name, with
	// Concurrency and Timeout.
	Registry    *registry.Registry
	Concurrency int // slots per lambda; task.DefaultConcurrency if zero
	Timeout     time.Duration
	Task        task.Config
	Logger      *slog.Logger
	// Token, if set, is the bearer token every API request must carry (httpapi.Guard).
	Token string
	// HTTP bounds the API listener's connections; zero fields take DefaultHTTPLimits'.
	HTTP HTTPLimits
	// Events, if set, receives the lifecycle events of every task write (package lifecycle):
	// `atf dev --events stdout|eventbridge`. They are sent in the background; Stop sends what
	// is left, for at most EventsCloseTimeout.
	Events lifecycle.Sink
	// NoSendAhead makes the API create every task new, for the consumer's sweep to enqueue, as
	// before tasks were sent ahead (frontend.Config.Queue): for the chaos scenarios of the sweep.
	NoSendAhead bool
	// MessageTimesLease keeps a claimed task's message hidden in Queue until the run's end is
	// written, so that its visibility times the lease (controller.Config.MessageTimesLease), as
	// AWS's executors do: for a durable Queue (SQS) and the Store that goes with it, both given.
	MessageTimesLease bool
	// Visibility hides the messages the controllers receive (controller.Config.Visibility):
	// controller.DefaultVisibility if zero. With MessageTimesLease it is about how long the
	// tasks of a worker that died wait for their messages to come back.
	Visibility time.Duration
}

// HTTPLimits bound the connections of the API listener, so that slow and idle clients cannot
// hold connections, and their goroutines and buffers, without end.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // to read a request's headers
	ReadTimeout       time.Duration // to read a whole request, body included
	WriteTimeout      time.Duration // from the end of the headers to the end of the response
	IdleTimeout       time.Duration // a kept-alive connection waiting for its next request
	MaxHeaderBytes    int
}

// DefaultHTTPLimits are the limits of atf dev's listener. The largest body, a batch of 6 MiB
// (httpapi), takes ReadTimeout at 100 KiB/s; WriteTimeout leaves a request that took that long
// another minute to be served and answered. Both are well past the longest wait for a task's
// end (frontend.MaxWait, 25 s): the read deadline also cuts a request still being served.
var DefaultHTTPLimits = HTTPLimits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       time.Minute,
	WriteTimeout:      2 * time.Minute,
	IdleTimeout:       30 * time.Second,
	MaxHeaderBytes:    64 << 10,
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	d := DefaultHTTPLimits
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, d.ReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, d.WriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, d.MaxHeaderBytes)
	return l
}

// Stack is a running local atf.
type Stack struct {
	addr        string
	log         *slog.Logger
	store       task.Store
	ends        *taskend.Store // the embedded store's waiters of task ends; nil on another store
	events      *lifecycle.Publisher
	metrics     *prommetrics.Metrics // served at /metrics
	feed        *lifecycle.Feed
	embedded    *sqlitestore.Store
	claimer     *status.Claimer   // claims for the executors on the embedded store
	completer   *status.Completer // records the executors' results on the embedded store
	closeStore  bool
	lock        *os.File
	server      *http.Server
	consumer    *consumer.Consumer
	controllers []*controller.Controller
	activity    *dashboard.Activity // the dashboard's last hour of claims and results
	costs       *dashboard.Costs    // the dashboard's cost on AWS of each lambda's transitions today
	limits      *dashboard.Limits   // the dashboard's limits of each lambda and the starts they held today
	keys        *dashboard.Keys     // the dashboard's waiting and running tasks by key

	// With Functions: the event sources, and how to stop them and cut their invocations short.
	loops                 sync.WaitGroup
	stopLoops, abortLoops context.CancelFunc
}

// Start starts everything and returns once the API listens.
func Start(ctx context.Context, c Config) (*Stack, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Task = c.Task.WithDefaults()
	if err := c.Task.Validate(); err != nil {
		return nil, err
	}
	lambdas, handlers, unserved, err := c.lambdas()
	if err != nil {
		return nil, err
	}
	if len(unserved) > 0 {
		c.Logger.Warn("handlers not served: no entry of the registry runs them, so they would not run on AWS either; add an entry to serve one",
			"handlers", unserved, "folder", c.HandlersDir)
	}
	c.Mux = handlers
	s := &Stack{log: c.Logger, store: c.Store, activity: dashboard.NewActivity(names(lambdas), nil), costs: dashboard.NewCosts(names(lambdas), nil),
		limits: dashboard.NewLimits(lambdas, nil)}
	queue := c.Queue
	// runs is the store of the services that run tasks (consumer, status controller): the API's,
	// but on the embedded store a view whose transitions are not synced on their own, and whose
	// claims of short runs stay in memory (sqlitestore.Volatile): the executors that hold them
	// die with this process, and losing them only makes a task run again.
	var runs task.Store
	if (c.Store == nil) != (c.Queue == nil) {
		return nil, errors.New("local: give both Store and Queue, or neither")
	}
	if _, inMemory := c.Queue.(*memqueue.Queue); c.MessageTimesLease && (c.Queue == nil || inMemory) {
		// The embedded queue is in memory: a message lost with it would leave a lease untimed.
		return nil, errors.New("local: MessageTimesLease needs a durable Queue, and its Store, given")
	}
	var changes frontend.Changes
	if c.Store == nil {
		if err := s.openEmbedded(c.DBPath, c.retention()); err != nil {
			return nil, err
		}
		queue = memqueue.New()
		// This process alone writes the embedded store (openEmbedded's lock), so every write
		// that ends a task goes through this wrapper, which wakes the waits for its result.
		ends := taskend.Wrap(s.store)
		s.store, s.ends, changes = ends, ends, ends
		runs = ends.Through(s.embedded.Volatile())
	}
	// The live feed of the API's events endpoint (atf tail) keeps the latest events in memory.
	s.feed = lifecycle.NewFeed(0)
	pubs := lifecycle.Publishers{s.feed}
	if c.Events != nil {
		pub, err := lifecycle.NewPublisher(lifecycle.Config{Sink: c.Events, Logger: c.Logger})
		if err != nil {
			s.close()
			return nil, err
		}
		s.events, pubs = pub, append(pubs, pub)
	}
	// Every service of the stack writes through s.store (c.Store with Functions), or runs.
	s.store = lifecycle.Wrap(s.store, pubs)
	if runs != nil {
		runs = lifecycle.Wrap(runs, pubs)
	}
	if c.Store != nil {
		c.Store = s.store
	}
	// Metrics: the store's writes and errors, on every service of the stack (see serve), and
	// what the writes would cost on AWS and the starts limits held (the dashboard's costs and
	// limits).
	s.metrics = prommetrics.New(prommetrics.Config{Lambdas: lambdas, Counts: s.store.Counts, Queue: sizer(queue), Logger: c.Logger})
	writes := metrics.Tee{s.metrics, s.costs, s.limits}
	s.store = metrics.Wrap(s.store, writes)
	s.keys = dashboard.NewKeys(s.store, names(lambdas))
	if runs != nil {
		runs = metrics.Wrap(runs, writes)
	} else {
		runs = s.store
	}
	if c.Store != nil {
		c.Store = s.store
	}
	if c.Functions != nil {
		if c.Store == nil {
			return nil, errors.New("local: Functions needs Store and Queue on DynamoDB and SQS")
		}
		if err := s.startFunctions(c, lambdas); err != nil {
			s.Stop(context.Background())
			return nil, err
		}
		c.Logger.Info("atf dev is up, running the function handlers", "api", "http://"+s.addr, "lambdas", names(lambdas))
		return s, nil
	}
	// One snapshot of the gates for the claims and the schedule path: a gate set through the API
	// acts on both at once.
	gates := &task.GateSnapshot{Store: s.store, Age: status.GateAge}
	// The schedules' firings create tasks through the synced store, as the API does.
	// A pass enqueues what comes due before the pass after next, its messages delayed to the
	// tasks' run times: a task the API could not send ahead (its lambda's room was taken) still
	// starts on time, not up to a poll interval late.
	cons := consumer.New(runs, queue, consumer.Config{
		Lambdas: task.FixedCatalog(lambdas), Task: c.Task, Logger: c.Logger, Scheduler: c.firings(s.store, lambdas, queue, gates), Metrics: s.metrics,
		SweepAhead: 2 * c.Task.PollInterval,
	})
	if c.Store == nil {
		// The in-memory queue and the executors died with the previous process: run what they
		// held again now, rather than after its timeouts.
		if n, err := cons.Recover(ctx); err != nil {
			s.close()
			return nil, fmt.Errorf("recover in-flight tasks: %w", err)
		} else if n > 0 {
			c.Logger.Info("recovered tasks left in flight by a previous run", "tasks", n)
		}
	}
	hsc := status.New(runs, status.Config{Task: c.Task, Logger: c.Logger, Gates: gates, Queue: c.aheadQueue(queue), Lambdas: task.FixedCatalog(lambdas)})
	ecfg := executor.Config{Task: c.Task, Logger: c.Logger, Metrics: s.metrics}
	signal := claimSignal{Controller: hsc, claimed: cons.Claimed, activity: s.activity}
	if c.Store == nil {
		// Claims and results are written in batches, a read and a commit for those made
		// meanwhile, and the slots do not wait for the results' writes.
		s.claimer = status.NewClaimer(hsc)
		s.completer = status.NewCompleter(hsc, s.activity.Ended)
		signal.batch, ecfg.Results = s.claimer, s.completer
	}
	exec := executor.New(signal, ecfg)
	for _, l := range lambdas {
		h, _ := c.Mux.Handler(l.Name)
		s.controllers = append(s.controllers, controller.Start(controller.Config{
			Lambda: l, Handler: h, Queue: queue, Executor: exec, IdleWait: c.IdleWait, Logger: c.Logger,
			MessageTimesLease: c.MessageTimesLease, Visibility: c.Visibility,
		}))
	}
	cons.Start()
	s.consumer = cons

	// On a store other processes may write too, waits poll it (frontend.Config.Changes).
	svc := frontend.New(s.store, frontend.Config{Lambdas: task.FixedCatalog(lambdas), Task: c.Task, Notify: cons.Wake, Changes: changes, Queue: c.aheadQueue(queue), SendFirst: true, Gates: gates, Logger: c.Logger, Feed: s.feed})
	if err := s.serve(c, httpapi.New(svc, c.Logger)); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	c.Logger.Info("atf dev is up", "api", "http://"+s.addr, "lambdas", names(lambdas))
	return s, nil
}

// firings is what creates the tasks of periodic schedules' firings for the consumer: the schedule
// path, which sends them ahead to q, so that they run on time; unless c.NoSendAhead, when the
// consumer creates them for its sweep (consumer.Config.Scheduler).
func (c Config) firings(store task.Store, lambdas []task.Lambda, q task.Queue, gates *task.GateSnapshot) consumer.Scheduler {
	if c.NoSendAhead {
		return nil
	}
	return frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog(lambdas), Task: c.Task, Queue: q, SendFirst: true, Gates: gates, Logger: c.Logger})
}

// aheadQueue is the queue the API sends tasks ahead to: q, unless c.NoSendAhead.
func (c Config) aheadQueue(q task.Queue) task.Queue {
	if c.NoSendAhead {
		return nil
	}
	return q
}

// serve serves the API h on c.Addr, behind httpapi.Guard and within c.HTTP's limits, with the
// dashboard (dashboardRoutes).
func (s *Stack) serve(c Config, h http.Handler) error {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && c.Token == "" {
		// Beyond loopback the Host and Origin checks cannot tell a rebound or cross-origin page
		// from a real client, and the listener takes the machine's own loopback too: only a token
		// keeps a web page in the developer's browser from driving it.
		ln.Close()
		return fmt.Errorf("listening on %s, beyond loopback, needs a token (--token or ATF_TOKEN): without one any web page the browser opens could schedule, read and cancel tasks", ln.Addr())
	}
	s.addr = ln.Addr().String()
	l := c.HTTP.withDefaults()
	s.server = &http.Server{
		Handler:           s.dashboardRoutes(s.withMetrics(h), ln.Addr(), c.Token),
		ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout, WriteTimeout: l.WriteTimeout,
		IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
	}
	go func() { _ = s.server.Serve(ln) }() // ends with ErrServerClosed when stopped
	return nil
}

// withMetrics serves the metrics at GET /metrics beside h. They go behind the same Guard as the
// API: with a token, a scrape needs it too (Prometheus: authorization.credentials), since the
// metrics name the lambdas and tell how busy they are.
func (s *Stack) withMetrics(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	mux.Handle("/", h)
	return mux
}

// sizer is q's queue depth, if q can tell it (the in-memory queue); nil otherwise.
func sizer(q task.Queue) interface{ Sizes() []memqueue.Size } {
	if m, ok := q.(*memqueue.Queue); ok {
		return m
	}
	return nil
}

// claimSignal tells the consumer of every claim, so that a lambda held back by its cap on
// enqueued tasks is refilled as its workers drain its queue, not a poll interval later
// (consumer.Consumer.Claimed); and the dashboard's activity of every claim and result.
type claimSignal struct {
	*status.Controller
	batch    *status.Claimer // claims through it, if set
	claimed  func(lambda string)
	activity *dashboard.Activity
}

func (s claimSignal) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	claim := s.Controller.Claim
	if s.batch != nil {
		claim = s.batch.Claim
	}
	t, err := claim(ctx, lambda, id, delivery, token)
	if err == nil {
		s.claimed(lambda)
		s.activity.Claimed(t)
	}
	return t, err
}

func (s claimSignal) SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error) {
	t, err := s.Controller.SetResult(ctx, lambda, id, lease, r)
	if err == nil {
		s.activity.Ended(t)
	}
	return t, err
}

func names(lambdas []task.Lambda) []string {
	out := make([]string, len(lambdas))
	for i, l := range lambdas {
		out[i] = l.Name
	}
	return out
}

// Waiters returns how many API requests wait for a task's end on the embedded store (for tests
// and the bench); 0 on another store, where waits poll.
func (s *Stack) Waiters() int {
	if s.ends == nil {
		return 0
	}
	return s.ends.Waiters()
}

// Addr is the address the API listens on.
func (s *Stack) Addr() string { return s.addr }

// Stop shuts down gracefully: no new requests or tasks; running tasks may finish until ctx is
// done, and are then stopped and released for the next run.
func (s *Stack) Stop(ctx context.Context) {
	if s.server != nil {
		_ = s.server.Shutdown(ctx) // past ctx, the requests still open are cut
	}
	if s.consumer != nil {
		s.consumer.Stop()
	}
	if s.stopLoops != nil {
		s.stopFunctions(ctx)
	}
	var wg sync.WaitGroup
	for _, c := range s.controllers {
		wg.Go(func() { c.Stop(ctx) })
	}
	wg.Wait()
	if s.claimer != nil {
		s.claimer.Close()
		s.completer.Close()
	}
	s.close()
}

// Lambdas returns the lambdas the stack serves (see Config.Registry), with the programs of
// HandlersDir among their handlers.
func (c Config) Lambdas() ([]task.Lambda, error) {
	lambdas, _, _, err := c.lambdas()
	return lambdas, err
}

// lambdas returns the lambdas to serve, a Mux of their handlers by lambda, and the handlers
// (of Mux and HandlersDir) that no lambda runs, sorted. Without a Registry every handler is a
// lambda, with c.Concurrency and c.Timeout. With one, its entries alone are lambdas, as on AWS,
// where nothing else is deployed: each runs its entry's handler, and an entry whose handler is
// missing is an error.
func (c Config) lambdas() ([]task.Lambda, *worker.Mux, []string, error) {
	all := worker.NewMux()
	if c.Mux != nil {
		for _, name := range c.Mux.Lambdas() {
			h, _ := c.Mux.Handler(name)
			all.Handle(name, h)
		}
	}
	if c.HandlersDir != "" {
		if _, err := all.HandleDir(c.HandlersDir); err != nil {
			return nil, nil, nil, err
		}
	}
	var lambdas []task.Lambda
	served := all
	var unserved []string
	if c.Registry == nil {
		for _, name := range all.Lambdas() {
			lambdas = append(lambdas, task.Lambda{Name: name, Concurrency: c.Concurrency, Timeout: c.Timeout}.WithDefaults())
		}
	} else {
		served = worker.NewMux()
		used := map[string]bool{}
		for _, e := range c.Registry.Lambdas {
			h, err := c.handlerOf(e, all)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("registry: lambda %q: %w", e.Name, err)
			}
			served.Handle(e.Name, h) // a lambda may run another's handler, as sleep-long runs sleep
			if e.Program == "" {
				used[e.Handler] = true
			}
			lambdas = append(lambdas, e.Lambda().WithDefaults())
		}
		unserved = slices.DeleteFunc(all.Lambdas(), func(name string) bool { return used[name] })
		slices.SortFunc(lambdas, func(a, b task.Lambda) int { return strings.Compare(a.Name, b.Name) })
	}
	for _, l := range lambdas {
		if err := l.Validate(); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(lambdas) == 0 {
		return nil, nil, nil, errors.New("no lambdas: register Go handlers or give a handlers folder with executable files")
	}
	return lambdas, served, unserved, nil
}

// handlerOf returns the handler of registry entry e: its program, or its handler of all.
func (c Config) handlerOf(e registry.Entry, all *worker.Mux) (worker.Handler, error) {
	if e.Program != "" {
		path, err := filepath.Abs(c.Registry.ProgramPath(e))
		if err != nil {
			return nil, err
		}
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("program: %w", err)
		}
		if !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("program %s: not an executable file (chmod +x it)", path)
		}
		return worker.Program{Path: path}, nil
	}
	if h, ok := all.Handler(e.Handler); ok {
		return h, nil
	}
	if c.HandlersDir == "" {
		return nil, fmt.Errorf("no handler %q: no handlers folder was given (--handlers), and no Go handler is registered under that name", e.Handler)
	}
	return nil, fmt.Errorf("no handler %q: want an executable file named %s (with any extension) in the handlers folder %s", e.Handler, e.Handler, c.HandlersDir)
}

// lockTries is how many times, 100 ms apart, openEmbedded tries to take the database's lock.
const lockTries = 30

// retention is the embedded store's pruning of finished tasks, as c.Retention says.
func (c Config) retention() sqlitestore.Options {
	o := sqlitestore.Options{Retention: cmp.Or(c.Retention, sqlitestore.DefaultRetention), Logger: c.Logger}
	if c.Retention < 0 {
		o.Retention = 0 // kept forever
	}
	return o
}

// openEmbedded opens the SQLite store, owned by this process alone.
func (s *Stack) openEmbedded(path string, o sqlitestore.Options) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// The in-memory queue and the executors live in this process only, so one process owns the
	// database: that is what makes Recover safe.
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	// A process that just crashed may still be letting go of the lock: wait a moment for it.
	for tries := 0; ; tries++ {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if tries == lockTries {
			lock.Close()
			return fmt.Errorf("%s is in use by another atf dev", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
	store, err := sqlitestore.OpenWith(path, o)
	if err != nil {
		lock.Close()
		return err
	}
	s.store, s.embedded, s.lock, s.closeStore = store, store, lock, true
	return nil
}

// EventsCloseTimeout bounds the wait at Stop for the lifecycle events not sent yet.
const EventsCloseTimeout = 5 * time.Second

func (s *Stack) close() {
	if s.events != nil {
		ctx, cancel := context.WithTimeout(context.Background(), EventsCloseTimeout)
		if err := s.events.Close(ctx); err != nil {
			s.log.Warn("lifecycle events not sent before atf dev stopped", "err", err)
		}
		cancel()
		if st := s.events.Stats(); st.Dropped+st.Failed > 0 {
			s.log.Warn("lifecycle events lost", "dropped", st.Dropped, "failed", st.Failed, "sent", st.Sent)
		}
	}
	if s.closeStore {
		s.store.Close()
		s.lock.Close()
	}
}
