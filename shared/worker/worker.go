// Package worker is the SDK for lambda owners: a handler is a Go function registered by lambda
// name, or any executable program. The same handler runs under `atf dev`, in a worker function
// and in an ECS executor.
//
// Public surface: a lambda owner imports task, worker and client (and workerfn in a Go handler's
// main); every other package under shared/ is the framework's own. See the README's Folders.
//
// A handler's error decides the task's fate: wrap ErrFatal (or call Fatal) to end the task as
// fatal_failure; any other error is retriable, and the task runs again after a backoff until its
// attempts are used up. A panic is a retriable failure too. Return Snooze(d) to run again after
// d with no attempt counted, or RetryAfter(d, err) for a retriable failure whose next attempt
// comes after d instead of the backoff. The task keeps the error's text, cut
// to its first task.MaxErrorBytes (4 KiB) with a marker: put long diagnostics in the logs.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// Task is what a handler is given to run.
type Task struct {
	ID         string
	Lambda     string
	Collection string
	Priority   string
	Attempt    int // 1 on the first run
	Payload    json.RawMessage
	// Inputs are the outcomes of the upstreams the task waited for (its after), in the order it
	// named them; nil for a task without upstreams. See Upstream.
	Inputs []task.Input
}

// Upstream returns the outcome of the upstream named by id, or by "lambda/id" for a task of
// another lambda than the first with that id, and whether the task waited for it.
func (t Task) Upstream(id string) (task.Input, bool) {
	for _, in := range t.Inputs {
		if in.ID == id || in.Lambda+"/"+in.ID == id {
			return in, true
		}
	}
	return task.Input{}, false
}

// DecodeUpstream decodes the result of the upstream named by id (as for Upstream) into v.
func (t Task) DecodeUpstream(id string, v any) error {
	in, ok := t.Upstream(id)
	if !ok {
		return fmt.Errorf("task %s did not wait for %s", t.ID, id)
	}
	if len(in.Result) == 0 {
		return fmt.Errorf("upstream %s/%s ended %s with no result", in.Lambda, in.ID, in.Status)
	}
	return json.Unmarshal(in.Result, v)
}

// Handler runs tasks of one lambda. It returns the task's result as JSON (nil for none), or an
// error, of which the task keeps at most task.MaxErrorBytes. It must
// return when ctx is done: the executor cancels ctx when the handler times out or the executor
// can no longer prove it owns the task.
type Handler interface {
	Handle(ctx context.Context, t Task) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t Task) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, t Task) (json.RawMessage, error) { return f(ctx, t) }

// ErrFatal marks an error that retrying cannot fix. Wrap it: fmt.Errorf("bad address: %w", ErrFatal).
var ErrFatal = errors.New("fatal")

type fatalError struct{ err error }

func (e fatalError) Error() string        { return e.err.Error() }
func (e fatalError) Unwrap() []error      { return []error{e.err, ErrFatal} }
func (e fatalError) Is(target error) bool { return target == ErrFatal }

// Fatal marks err as not worth retrying.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return fatalError{err}
}

// Retriable reports whether a handler error leaves the task worth another attempt.
func Retriable(err error) bool { return !errors.Is(err, ErrFatal) }

// Run calls h, turning a panic into a retriable error that carries the stack.
func Run(ctx context.Context, h Handler, t Task) (result json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h.Handle(ctx, t)
}

// Mux maps lambda names to handlers. Registration mistakes panic, so they show at start-up.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for lambda. It panics if the name is invalid or already taken.
func (m *Mux) Handle(lambda string, h Handler) {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		panic("worker: " + err.Error())
	}
	if h == nil {
		panic("worker: nil handler for lambda " + lambda)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[lambda]; dup {
		panic("worker: lambda " + lambda + " is registered twice")
	}
	m.handlers[lambda] = h
}

// HandleFunc registers f for lambda.
func (m *Mux) HandleFunc(lambda string, f func(ctx context.Context, t Task) (json.RawMessage, error)) {
	m.Handle(lambda, HandlerFunc(f))
}

// Handler returns the handler of lambda, if any.
func (m *Mux) Handler(lambda string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[lambda]
	return h, ok
}

// Lambdas returns the registered lambda names, sorted.
func (m *Mux) Lambdas() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make([]string, 0, len(m.handlers))
	for n := range m.handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
