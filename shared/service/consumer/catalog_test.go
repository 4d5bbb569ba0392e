package consumer_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/catalogtest"
)

// passLog counts each lambda's ended passes, and tells a test when one ended.
type passLog struct {
	mu    sync.Mutex
	ends  map[string]int
	ended chan string
}

func (p *passLog) Pass(lambda string, _ time.Duration, _ bool) {
	p.mu.Lock()
	p.ends[lambda]++
	p.mu.Unlock()
	select {
	case p.ended <- lambda:
	default:
	}
}

func (p *passLog) count(lambda string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends[lambda]
}

// awaitPasses waits until lambda has ended n more passes, reading p.ended.
func (p *passLog) awaitPasses(t *testing.T, lambda string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second) // a guard against a hang only
	for n > 0 {
		select {
		case l := <-p.ended:
			if l == lambda {
				n--
			}
		case <-timeout:
			t.Fatalf("no pass of %s", lambda)
		}
	}
}

// TestRunFollowsTheCatalog: Run starts sweeping a lambda that appears in its catalog, and sweeps
// one that goes no more: no pass of it begins once the change is seen.
func TestRunFollowsTheCatalog(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	a, b, c := task.Lambda{Name: "a"}.WithDefaults(), task.Lambda{Name: "b"}.WithDefaults(), task.Lambda{Name: "c"}.WithDefaults()
	cat := &catalogtest.Changing{}
	cat.Set(a, b)
	passes := &passLog{ends: map[string]int{}, ended: make(chan string)}
	cons := consumer.New(store, memqueue.New(), consumer.Config{Lambdas: cat, Metrics: passes, Jitter: func() float64 { return 0 }})
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan consumer.RunStats)
	go func() { ran <- cons.Run(ctx, consumer.RunParams{Interval: 5 * time.Millisecond}) }()

	passes.awaitPasses(t, "b", 1)
	cat.Set(a, c) // b's stack deleted, c's deployed
	// c's first pass began after Run saw the change. A lambda has one pass in flight at most, so
	// from the end of c's first pass at most one more pass of b ends: one begun before the change.
	passes.awaitPasses(t, "c", 1)
	bThen := passes.count("b")
	passes.awaitPasses(t, "a", 5) // time for b's passes, if it were still swept
	stop()
	<-ran

	if more := passes.count("b") - bThen; more > 1 {
		t.Errorf("%d passes of b ended after c's first pass had: b is swept after it went", more)
	}
}
