package frontend_test

// Regression tests of task flows found by a hostile review: a flow request that fails must leave
// no mark on its upstreams (task.Task.Downstream), since a marked task that failed cannot be
// redriven. Each runs on the embedded store and on DynamoDB Local.

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// onBackends runs test on a fresh embedded store and on a fresh table of DynamoDB Local (which
// skips without an endpoint, unless ATF_AWS_TESTS=require).
func onBackends(t *testing.T, test func(t *testing.T, store task.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		test(t, store)
	})
	t.Run("dynamodb", func(t *testing.T) {
		test(t, awstest.NewStore(t, "atf-frontend", dynamostore.Config{}))
	})
}

// faultyStore fails the writes a test names, as a lost connection, a throttled or refused write,
// or a crash of the caller would; before, if set, runs ahead of AddUpstreams (a racing writer).
type faultyStore struct {
	task.Store
	createErr, batchErr, addErr, updateErr error
	before                                 func()
}

func (s *faultyStore) Create(ctx context.Context, t task.Task) error {
	if s.createErr != nil {
		return s.createErr
	}
	return s.Store.Create(ctx, t)
}

func (s *faultyStore) CreateBatch(ctx context.Context, tasks []task.Task) error {
	if s.batchErr != nil {
		return s.batchErr
	}
	return s.Store.CreateBatch(ctx, tasks)
}

func (s *faultyStore) Update(ctx context.Context, t task.Task, prev int64) error {
	if s.updateErr != nil {
		return s.updateErr
	}
	return s.Store.Update(ctx, t, prev)
}

func (s *faultyStore) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	if s.before != nil {
		s.before()
	}
	if s.addErr != nil {
		return s.addErr
	}
	return s.Store.AddUpstreams(ctx, t, prev, from)
}

// flowRig is a frontend over a store, its clock, and a consumer to sweep it.
type flowRig struct {
	t     *testing.T
	store task.Store
	l     task.Lambda
	cfg   task.Config
	now   time.Time
	svc   *frontend.Service
}

func newFlowRig(t *testing.T, store task.Store) *flowRig {
	r := &flowRig{t: t, store: store, l: task.Lambda{Name: "echo"}.WithDefaults(), cfg: task.Config{}.WithDefaults(), now: time.Now().UTC().Truncate(time.Millisecond)}
	r.svc = r.service(store)
	return r
}

// service is a frontend over store (the rig's, or a wrapper of it) with the rig's clock.
func (r *flowRig) service(store task.Store) *frontend.Service {
	return frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg, Now: func() time.Time { return r.now }})
}

func (r *flowRig) schedule(spec task.Spec) {
	r.t.Helper()
	if _, created, err := r.svc.Schedule(ctx, "echo", spec); err != nil || !created {
		r.t.Fatalf("schedule %s: created %v, %v", spec.ID, created, err)
	}
}

func (r *flowRig) get(id string) task.Task {
	r.t.Helper()
	tk, err := r.store.Get(ctx, "echo", id)
	if err != nil {
		r.t.Fatalf("get %s: %v", id, err)
	}
	return tk
}

// force writes a stored task changed by fn, as the transitions of its runs would.
func (r *flowRig) force(id string, fn func(*task.Task)) {
	r.t.Helper()
	tk := r.get(id)
	next := tk
	fn(&next)
	next.Version, next.UpdatedAt = tk.Version+1, r.now
	if err := r.store.Update(ctx, next, tk.Version); err != nil {
		r.t.Fatalf("force %s: %v", id, err)
	}
}

// failed schedules a task and fails it for good: a task a redrive takes.
func (r *flowRig) failed(id string) {
	r.t.Helper()
	r.schedule(task.Spec{ID: id})
	r.force(id, func(tk *task.Task) {
		tk.Status, tk.Attempts, tk.Error, tk.NextTriggerAt = task.StatusFatalFailure, 1, "boom", nil
	})
}

func (r *flowRig) sweep() consumer.Stats {
	r.t.Helper()
	return r.sweepOn(r.store)
}

// sweepOn runs a consumer pass over store (the rig's, or a wrapper of it).
func (r *flowRig) sweepOn(store task.Store) consumer.Stats {
	r.t.Helper()
	c := consumer.New(store, memqueue.New(), consumer.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg, Now: func() time.Time { return r.now }, Jitter: func() float64 { return 0 }})
	st, err := c.Sweep(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// finish claims and succeeds an enqueued task.
func (r *flowRig) finish(id string) {
	r.t.Helper()
	_, err := task.Apply(ctx, r.store, "echo", id, func(tk task.Task) (task.Task, error) {
		tk, err := task.Claim(tk, "lease", r.now, r.cfg)
		if err != nil {
			return tk, err
		}
		return task.Succeed(tk, "lease", []byte(`"done"`), r.now, r.cfg)
	})
	if err != nil {
		r.t.Fatalf("finish %s: %v", id, err)
	}
}

// redrivable fails the test unless the failed task id is unmarked and a redrive takes it.
func (r *flowRig) redrivable(id string) {
	r.t.Helper()
	if up := r.get(id); up.Downstream {
		r.t.Errorf("%s is marked as having downstreams, though no task waits for it", id)
	}
	if _, err := r.svc.Redrive(ctx, "echo", id, task.RedriveOptions{}); err != nil {
		r.t.Errorf("redrive %s, which no task waits for: %v", id, err)
	}
}

// TestFlowFailedRequestLeavesNoMark: a Schedule, a batch or an AddUpstreams naming an upstream
// that fails, however it fails, leaves the upstream as it was: unmarked, and redrivable.
func TestFlowFailedRequestLeavesNoMark(t *testing.T) {
	up := []task.Ref{{ID: "up"}}
	lost := errors.New("connection reset")
	tooLarge := task.Errorf(task.ErrTooLarge, "the item is over the store's limit")
	for _, c := range []struct {
		name    string
		prepare func(r *flowRig, s *faultyStore) // before the request
		request func(svc *frontend.Service) error
		want    error // the request's error
	}{{
		name: "add upstreams loses to a claim",
		prepare: func(r *flowRig, s *faultyStore) {
			r.schedule(task.Spec{ID: "down"})
			s.before = func() { // the claim lands between AddUpstreams' read and its write
				s.before = nil
				r.force("down", func(tk *task.Task) { tk.Status, tk.Attempts, tk.NextTriggerAt = task.StatusClaimed, 1, nil })
			}
		},
		request: func(svc *frontend.Service) error {
			_, err := svc.AddUpstreams(ctx, "echo", "down", up)
			return err
		},
		want: task.ErrConflict,
	}, {
		name:    "add upstreams fails at the store",
		prepare: func(r *flowRig, s *faultyStore) { r.schedule(task.Spec{ID: "down"}); s.addErr = lost },
		request: func(svc *frontend.Service) error {
			_, err := svc.AddUpstreams(ctx, "echo", "down", up)
			return err
		},
		want: lost,
	}, {
		name:    "schedule with an id another request took",
		prepare: func(r *flowRig, s *faultyStore) { r.schedule(task.Spec{ID: "down"}) },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.Schedule(ctx, "echo", task.Spec{ID: "down", After: up})
			return err
		},
		want: task.ErrConflict,
	}, {
		name:    "schedule fails at the store",
		prepare: func(r *flowRig, s *faultyStore) { s.createErr = lost },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.Schedule(ctx, "echo", task.Spec{ID: "down", After: up})
			return err
		},
		want: lost,
	}, {
		name:    "schedule refused as too large",
		prepare: func(r *flowRig, s *faultyStore) { s.createErr = tooLarge },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.Schedule(ctx, "echo", task.Spec{ID: "down", After: up})
			return err
		},
		want: task.ErrTooLarge,
	}, {
		name:    "batch with an id another request took",
		prepare: func(r *flowRig, s *faultyStore) { r.schedule(task.Spec{ID: "taken"}) },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "down", After: up}, {ID: "taken", Payload: []byte(`1`)}})
			return err
		},
		want: task.ErrConflict,
	}, {
		name:    "batch whose ids are all taken by other requests",
		prepare: func(r *flowRig, s *faultyStore) { r.schedule(task.Spec{ID: "down"}) },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "down", After: up}})
			return err
		},
		want: task.ErrConflict,
	}, {
		name:    "batch fails at the store",
		prepare: func(r *flowRig, s *faultyStore) { s.batchErr = lost },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "mid", After: up}, {ID: "down", After: []task.Ref{{ID: "mid"}}}})
			return err
		},
		want: lost,
	}, {
		name:    "batch refused as too large",
		prepare: func(r *flowRig, s *faultyStore) { s.batchErr = tooLarge },
		request: func(svc *frontend.Service) error {
			_, _, err := svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "down", After: up}})
			return err
		},
		want: task.ErrTooLarge,
	}} {
		t.Run(c.name, func(t *testing.T) {
			onBackends(t, func(t *testing.T, store task.Store) {
				r := newFlowRig(t, store)
				r.failed("up")
				faulty := &faultyStore{Store: store}
				c.prepare(r, faulty)
				err := c.request(r.service(faulty))
				if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
					t.Fatalf("the request answered %v, want %v", err, c.want)
				}
				r.redrivable("up")
			})
		})
	}
}

// TestFlowCreatedDownstreamRefusesRedrive: the other side of TestFlowFailedRequestLeavesNoMark: once
// a task that waits for a failed task exists, by any of the three requests, the failed task is
// marked and its redrive refused (the downstream learns, or has learnt, that it failed).
func TestFlowCreatedDownstreamRefusesRedrive(t *testing.T) {
	up := []task.Ref{{ID: "up"}}
	for _, c := range []struct {
		name    string
		request func(r *flowRig) error
	}{
		{"schedule", func(r *flowRig) error {
			_, _, err := r.svc.Schedule(ctx, "echo", task.Spec{ID: "down", After: up})
			return err
		}},
		{"batch", func(r *flowRig) error {
			_, _, err := r.svc.ScheduleBatch(ctx, "echo", []task.Spec{{ID: "down", After: up}})
			return err
		}},
		{"add upstreams", func(r *flowRig) error {
			r.schedule(task.Spec{ID: "down"})
			_, err := r.svc.AddUpstreams(ctx, "echo", "down", up)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			onBackends(t, func(t *testing.T, store task.Store) {
				r := newFlowRig(t, store)
				r.failed("up")
				if err := c.request(r); err != nil {
					t.Fatal(err)
				}
				if !r.get("up").Downstream {
					t.Error("up is not marked, though down waits for it")
				}
				if _, err := r.svc.Redrive(ctx, "echo", "up", task.RedriveOptions{}); !errors.Is(err, task.ErrConflict) {
					t.Errorf("redrive of up, which down waits for: %v, want a conflict", err)
				}
				r.sweep()
				if got := r.get("down"); got.Status != task.StatusUpstreamFailed {
					t.Errorf("down is %s, want upstream_failed", got.Status)
				}
			})
		})
	}
}

// TestFlowCheckMarksUpstreams: a downstream created while the marks of its upstreams were not
// written (the frontend died after the create, or its marks failed) is told of an upstream that
// ends after its check all the same: the check marks the upstream before it clears its trigger.
func TestFlowCheckMarksUpstreams(t *testing.T) {
	onBackends(t, func(t *testing.T, store task.Store) {
		r := newFlowRig(t, store)
		r.schedule(task.Spec{ID: "up"})
		failing := r.service(&faultyStore{Store: store, updateErr: errors.New("connection reset")})
		if _, _, err := failing.Schedule(ctx, "echo", task.Spec{ID: "down", After: []task.Ref{{ID: "up"}}}); err != nil {
			t.Fatalf("schedule down, whose create succeeded: %v", err)
		}
		r.sweep() // checks down (up is running) and enqueues up
		if !r.get("up").Downstream {
			t.Fatal("down's check left up unmarked: up's end would never reach down")
		}
		r.finish("up")
		r.sweep()
		if got := r.get("down"); got.Status == task.StatusPending {
			t.Errorf("down is still pending after up succeeded")
		}
	})
}

// redriveOnRead redrives a task through svc once a read of the consumer's check has seen it
// failed and unmarked, as a redrive racing the check would: the read is then stale.
type redriveOnRead struct {
	task.Store
	svc  *frontend.Service
	id   string
	once sync.Once
	err  error
}

func (s *redriveOnRead) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	got, err := s.Store.GetMany(ctx, refs)
	for _, tk := range got {
		if tk.ID == s.id && tk.Status == task.StatusFatalFailure && !tk.Downstream {
			s.once.Do(func() { _, s.err = s.svc.Redrive(ctx, tk.Lambda, tk.ID, task.RedriveOptions{}) })
		}
	}
	return got, err
}

// TestFlowCheckRacesRedrive: a check that reads a failed, unmarked upstream while a redrive gives
// it a second life settles its downstream from the upstream as marked, not as read: the
// downstream waits for the second life, which tells it; it never ends for the first life's
// failure while the upstream runs again.
func TestFlowCheckRacesRedrive(t *testing.T) {
	onBackends(t, func(t *testing.T, store task.Store) {
		r := newFlowRig(t, store)
		r.failed("up")
		failing := r.service(&faultyStore{Store: store, updateErr: errors.New("connection reset")})
		if _, _, err := failing.Schedule(ctx, "echo", task.Spec{ID: "down", After: []task.Ref{{ID: "up"}}}); err != nil {
			t.Fatalf("schedule down, whose create succeeded: %v", err)
		}
		racing := &redriveOnRead{Store: store, svc: r.svc, id: "up"}
		r.sweepOn(racing)
		if racing.err != nil {
			t.Fatalf("the racing redrive: %v", racing.err)
		}
		if got := r.get("down"); got.Status != task.StatusPending {
			t.Fatalf("down is %s (%s) though up was redriven before it was marked: up's second life would not reach it", got.Status, got.Error)
		}
		if !r.get("up").Downstream {
			t.Fatal("down's check left up unmarked")
		}
		r.sweep() // enqueues up
		r.finish("up")
		r.sweep()
		if got := r.get("down"); got.Status == task.StatusPending || got.Status == task.StatusUpstreamFailed {
			t.Errorf("down is %s after up's second life succeeded", got.Status)
		}
	})
}

// pruneOnCreate runs the embedded store's retention, with a cutoff past every task, just before
// each create: retention removing a finished task between the request's read of it and the write
// of the task that waits for it.
type pruneOnCreate struct{ *sqlitestore.Store }

func (s pruneOnCreate) Create(ctx context.Context, t task.Task) error {
	if _, err := s.Prune(ctx, time.Now().Add(24*time.Hour), 1000); err != nil {
		return err
	}
	return s.Store.Create(ctx, t)
}

// TestFlowSucceededUpstreamOutlivesRetention: a task scheduled after one that succeeded long
// ago runs with it, even when retention runs between the request's read of the upstream and the
// downstream's create: the succeeded upstream is marked, which keeps it, before the create.
// (With the marks written after the create, retention removed it and the downstream ended
// upstream_failed, its upstream gone, though it had succeeded.)
func TestFlowSucceededUpstreamOutlivesRetention(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := newFlowRig(t, store)
	r.schedule(task.Spec{ID: "up"})
	r.sweep()
	r.finish("up")
	r.sweep() // up has no downstreams: nothing left to tell
	pruning := r.service(pruneOnCreate{store})
	if _, _, err := pruning.Schedule(ctx, "echo", task.Spec{ID: "down", After: []task.Ref{{ID: "up"}}}); err != nil {
		t.Fatalf("schedule down after up, which succeeded: %v", err)
	}
	r.sweep()
	if got := r.get("down"); got.Status == task.StatusUpstreamFailed || got.Status == task.StatusPending {
		t.Errorf("down is %s (%s) after its upstream succeeded", got.Status, got.Error)
	}
}

// TestFlowAddUpstreamsCycleMarksNothing: an AddUpstreams that answers 422 because a racing call
// closed a cycle leaves no mark on its other upstreams: a failed one of them stays redrivable.
func TestFlowAddUpstreamsCycleMarksNothing(t *testing.T) {
	onBackends(t, func(t *testing.T, store task.Store) {
		r := newFlowRig(t, store)
		r.schedule(task.Spec{ID: "a"})
		r.schedule(task.Spec{ID: "b"})
		r.failed("f")
		// b waits for a, written as if by a racing call that checked before a's call wrote.
		racing := &faultyStore{Store: store}
		racing.before = func() {
			racing.before = nil
			if _, err := r.svc.AddUpstreams(ctx, "echo", "b", []task.Ref{{ID: "a"}}); err != nil {
				t.Errorf("the racing AddUpstreams(b, [a]): %v", err)
			}
		}
		_, err := r.service(racing).AddUpstreams(ctx, "echo", "a", []task.Ref{{ID: "b"}, {ID: "f"}})
		if !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("AddUpstreams(a, [b, f]) closing a cycle with a racing call: %v, want invalid", err)
		}
		r.redrivable("f")
	})
}

// refuseUpdateOf refuses every single-task write to one task, as a throttled or unreachable
// partition of another lambda's tasks would.
type refuseUpdateOf struct {
	task.Store
	id string
}

func (s refuseUpdateOf) Update(ctx context.Context, t task.Task, prev int64) error {
	if t.ID == s.id {
		return errors.New("injected: write refused")
	}
	return s.Store.Update(ctx, t, prev)
}

// TestFlowCheckMarkFailureKeepsPass: a check whose mark of an upstream fails leaves its task due
// and the rest of the pass goes on: the lambda's other tasks are enqueued all the same.
func TestFlowCheckMarkFailureKeepsPass(t *testing.T) {
	onBackends(t, func(t *testing.T, store task.Store) {
		r := newFlowRig(t, store)
		r.schedule(task.Spec{ID: "up"})
		failing := r.service(&faultyStore{Store: store, updateErr: errors.New("connection reset")})
		if _, _, err := failing.Schedule(ctx, "echo", task.Spec{ID: "down", After: []task.Ref{{ID: "up"}}}); err != nil {
			t.Fatalf("schedule down, whose create succeeded: %v", err)
		}
		r.schedule(task.Spec{ID: "other"})
		r.sweepOn(refuseUpdateOf{Store: store, id: "up"})
		if got := r.get("other"); got.Status != task.StatusEnqueued {
			t.Errorf("other is %s after the pass: the failed mark stopped the pass before it enqueued", got.Status)
		}
		if got := r.get("down"); got.Status != task.StatusPending || got.NextTriggerAt == nil {
			t.Errorf("down is %s, trigger %v: want pending and still due for its check", got.Status, got.NextTriggerAt)
		}
		r.sweep()
		if !r.get("up").Downstream {
			t.Error("up is unmarked after a check whose writes went through")
		}
	})
}
