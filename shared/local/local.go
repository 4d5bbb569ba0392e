// Package local runs the whole framework in one process on the embedded store: the HTTP API,
// the store consumer, the status controller, and a controller with its executors per lambda.
// It is what `atf dev` starts, and what end-to-end tests start in-process.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/openatf/atf/shared/consumer"
	"github.com/openatf/atf/shared/controller"
	"github.com/openatf/atf/shared/executor"
	"github.com/openatf/atf/shared/frontend"
	"github.com/openatf/atf/shared/httpapi"
	"github.com/openatf/atf/shared/memqueue"
	"github.com/openatf/atf/shared/sqlitestore"
	"github.com/openatf/atf/shared/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Config configures a local stack.
type Config struct {
	Addr        string      // listen address, such as 127.0.0.1:8080; port 0 picks a free one
	DBPath      string      // the SQLite file; its folder is created
	Mux         *worker.Mux // Go handlers, and programs added from HandlersDir
	HandlersDir string      // every executable file here is a lambda; optional
	Concurrency int         // slots per lambda; task.DefaultConcurrency if zero
	Timeout     time.Duration
	Task        task.Config
	Logger      *slog.Logger
}

// Stack is a running local atf.
type Stack struct {
	addr        string
	log         *slog.Logger
	store       *sqlitestore.Store
	lock        *os.File
	server      *http.Server
	consumer    *consumer.Consumer
	controllers []*controller.Controller
}

// Start starts everything and returns once the API listens.
func Start(ctx context.Context, c Config) (*Stack, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Mux == nil {
		c.Mux = worker.NewMux()
	}
	c.Task = c.Task.WithDefaults()
	if err := c.Task.Validate(); err != nil {
		return nil, err
	}
	if c.HandlersDir != "" {
		if _, err := c.Mux.HandleDir(c.HandlersDir); err != nil {
			return nil, err
		}
	}
	var lambdas []task.Lambda
	for _, name := range c.Mux.Lambdas() {
		l := task.Lambda{Name: name, Concurrency: c.Concurrency, Timeout: c.Timeout}.WithDefaults()
		if err := l.Validate(); err != nil {
			return nil, err
		}
		lambdas = append(lambdas, l)
	}
	if len(lambdas) == 0 {
		return nil, errors.New("no lambdas: register Go handlers or give a handlers folder with executable files")
	}

	if err := os.MkdirAll(filepath.Dir(c.DBPath), 0o755); err != nil {
		return nil, err
	}
	// The in-memory queue and the executors live in this process only, so one process owns the
	// database: that is what makes Recover safe.
	lock, err := os.OpenFile(c.DBPath+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s is in use by another atf dev", c.DBPath)
	}
	store, err := sqlitestore.Open(c.DBPath)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s := &Stack{log: c.Logger, store: store, lock: lock}

	queue := memqueue.New()
	cons := consumer.New(store, queue, consumer.Config{Lambdas: lambdas, Task: c.Task, Logger: c.Logger})
	if n, err := cons.Recover(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("recover in-flight tasks: %w", err)
	} else if n > 0 {
		c.Logger.Info("recovered tasks left in flight by a previous run", "tasks", n)
	}
	hsc := status.New(store, status.Config{Task: c.Task, Logger: c.Logger})
	exec := executor.New(hsc, c.Task.HeartbeatInterval, c.Logger)
	for _, l := range lambdas {
		h, _ := c.Mux.Handler(l.Name)
		s.controllers = append(s.controllers, controller.Start(controller.Config{
			Lambda: l, Handler: h, Queue: queue, Status: hsc, Executor: exec, Logger: c.Logger,
		}))
	}
	cons.Start()
	s.consumer = cons

	svc := frontend.New(store, frontend.Config{Lambdas: lambdas, Task: c.Task, Notify: cons.Wake})
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	s.addr = ln.Addr().String()
	s.server = &http.Server{Handler: httpapi.New(svc, c.Logger), ReadHeaderTimeout: 10 * time.Second}
	go s.server.Serve(ln)
	names := make([]string, len(lambdas))
	for i, l := range lambdas {
		names[i] = l.Name
	}
	c.Logger.Info("atf dev is up", "api", "http://"+s.addr, "db", c.DBPath, "lambdas", names)
	return s, nil
}

// Addr is the address the API listens on.
func (s *Stack) Addr() string { return s.addr }

// Stop shuts down gracefully: no new requests or tasks; running tasks may finish until ctx is
// done, and are then stopped and released for the next run.
func (s *Stack) Stop(ctx context.Context) {
	if s.server != nil {
		s.server.Shutdown(ctx)
	}
	if s.consumer != nil {
		s.consumer.Stop()
	}
	var wg sync.WaitGroup
	for _, c := range s.controllers {
		wg.Go(func() { c.Stop(ctx) })
	}
	wg.Wait()
	s.close()
}

func (s *Stack) close() {
	s.store.Close()
	s.lock.Close()
}
