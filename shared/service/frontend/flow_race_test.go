package frontend_test

// Regression test of task flows found by a hostile review: AddUpstreams calls racing into a cycle.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
)

// barrier holds every AddUpstreams at the store until two have arrived: both callers have done
// their cycle check (reaches) by then, each before the other's edge exists.
type barrier struct {
	task.Store
	wg    *sync.WaitGroup
	mu    sync.Mutex
	calls int
}

func (b *barrier) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	b.mu.Lock()
	b.calls++
	first := b.calls <= 2
	b.mu.Unlock()
	if first {
		b.wg.Done()
		b.wg.Wait()
	}
	return b.Store.AddUpstreams(ctx, t, prev, from)
}

// two AddUpstreams that together close a cycle, A after B and B after A, each checked before
// the other wrote: the check after the write ends a task of the cycle, so none waits forever.
func TestFlowConcurrentAddUpstreamsCycle(t *testing.T) {
	onBackends(t, func(t *testing.T, store task.Store) {
		l := task.Lambda{Name: "echo"}.WithDefaults()
		now := func() time.Time { return t0 }
		plain := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{l}, Now: now})
		for _, id := range []string{"A", "B"} {
			if _, _, err := plain.Schedule(ctx, "echo", task.Spec{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		svc := frontend.New(&barrier{Store: store, wg: &wg}, frontend.Config{Lambdas: task.FixedCatalog{l}, Now: now})
		var errs [2]error
		var run sync.WaitGroup
		run.Go(func() { _, errs[0] = svc.AddUpstreams(ctx, "echo", "A", []task.Ref{{ID: "B"}}) })
		run.Go(func() { _, errs[1] = svc.AddUpstreams(ctx, "echo", "B", []task.Ref{{ID: "A"}}) })
		run.Wait()
		a, _ := store.Get(ctx, "echo", "A")
		b, _ := store.Get(ctx, "echo", "B")
		if errs[0] == nil && errs[1] == nil {
			t.Errorf("both AddUpstreams succeeded: A is %s after %v, B is %s after %v: a cycle, pending forever", a.Status, a.After, b.Status, b.After)
		}
		if a.Status != task.StatusUpstreamFailed && b.Status != task.StatusUpstreamFailed {
			t.Errorf("A is %s, B is %s: one of the tasks on the cycle must end", a.Status, b.Status)
		}
	})
}
