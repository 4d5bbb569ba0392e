package dynamostore_test

// Regression tests of task flows found by a hostile review: stale edges, edges to tasks that do
// not exist, and upstreams that retention removed.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

type rig struct {
	t     *testing.T
	db    *dynamodb.Client
	table string
	s     *dynamostore.Store
	l     task.Lambda
	cfg   task.Config
	fe    *frontend.Service
	q     *memqueue.Queue
}

func newRig(t *testing.T, quota int, retention time.Duration) *rig {
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table, Retention: retention})
	r := &rig{t: t, db: db, table: table, s: s, l: task.Lambda{Name: "a"}.WithDefaults(), cfg: task.Config{EnqueueQuota: quota}.WithDefaults(), q: memqueue.New()}
	r.fe = frontend.New(s, frontend.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg})
	return r
}

func (r *rig) sweep(st task.Store) consumer.Stats {
	r.t.Helper()
	c := consumer.New(st, r.q, consumer.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg})
	stats, err := c.Sweep(r.t.Context())
	if err != nil {
		r.t.Fatal(err)
	}
	return stats
}

func (r *rig) get(id string) task.Task {
	r.t.Helper()
	tk, err := r.s.Get(r.t.Context(), "a", id)
	if err != nil {
		r.t.Fatalf("get %s: %v", id, err)
	}
	return tk
}

// finish claims and ends an enqueued task.
func (r *rig) finish(id string, ok bool) {
	r.t.Helper()
	now := time.Now().UTC()
	_, err := task.Apply(r.t.Context(), r.s, "a", id, func(tk task.Task) (task.Task, error) {
		tk, err := task.Claim(tk, "lease", now, r.cfg)
		if err != nil {
			return tk, err
		}
		if ok {
			return task.Succeed(tk, "lease", []byte(`"done"`), now, r.cfg)
		}
		return task.Fail(tk, "lease", "broken", false, now, r.cfg, 0)
	})
	if err != nil {
		r.t.Fatalf("finish %s: %v", id, err)
	}
}

func (r *rig) schedule(spec task.Spec) {
	r.t.Helper()
	if _, _, err := r.fe.Schedule(r.t.Context(), "a", spec); err != nil {
		r.t.Fatalf("schedule %s: %v", spec.ID, err)
	}
}

// a Schedule refused with 409 (same id, different after) rewrites the edge of an upstream
// that the existing task also waits for, with another index; the existing task then never learns
// that this upstream ended, and stays pending forever.
func TestFlowRejectedScheduleCorruptsEdge(t *testing.T) {
	r := newRig(t, 0, 0)
	r.schedule(task.Spec{ID: "A"})
	r.schedule(task.Spec{ID: "U"})
	r.schedule(task.Spec{ID: "T", After: []task.Ref{{ID: "A"}, {ID: "U"}}})
	r.sweep(r.s) // checks T (nothing ended), enqueues A and U
	// A client sends T again with another after: 409, as documented.
	_, _, err := r.fe.Schedule(t.Context(), "a", task.Spec{ID: "T", After: []task.Ref{{ID: "U"}}})
	if !errors.Is(err, task.ErrConflict) {
		t.Fatalf("different request with a taken id: %v, want a conflict", err)
	}
	r.finish("A", true)
	r.finish("U", true)
	for range 3 {
		r.sweep(r.s)
	}
	if got := r.get("T"); got.Status == task.StatusPending {
		t.Errorf("T is still pending (settled %08b) although A and U both succeeded: the rejected request rewrote the edge U→T", got.Settled)
	}
}

// failCreate makes Create fail, as a crash, a client that hangs up, or a throttled PutItem would,
// after linkUpstreams wrote the edges and marks.
type failCreate struct{ task.Store }

func (failCreate) Create(context.Context, task.Task) error { return errors.New("connection reset") }

// an edge to a task whose create failed makes dynamostore.Upstreams answer ErrNotFound; the
// consumer's settle takes that for an error, so the upstream is never Notified and is told again
// at every pass, at the head of the flow lane. With as many such upstreams as the flow read's
// limit (EnqueueQuota), no pending task of the lambda is ever checked again.
func TestFlowGhostEdgeWedgesFlowLane(t *testing.T) {
	r := newRig(t, 1, 0) // a quota of 1: one wedged upstream fills the flow read
	r.schedule(task.Spec{ID: "U"})
	ghostFE := frontend.New(failCreate{r.s}, frontend.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg})
	if _, _, err := ghostFE.Schedule(t.Context(), "a", task.Spec{ID: "ghost", After: []task.Ref{{ID: "U"}}}); err == nil {
		t.Fatal("the create was to fail")
	}
	_, uerr := r.s.Upstreams(t.Context(), task.Ref{Lambda: "a", ID: "ghost"}, 0, 1)
	t.Logf("Upstreams(a/ghost, 0, 1): %v (the consumer's settle returns this as an error)", uerr)
	r.sweep(r.s) // enqueues U
	r.finish("U", true)
	for range 3 {
		r.sweep(r.s)
	}
	if got := r.get("U"); got.NextTriggerAt != nil {
		t.Errorf("U still has a trigger %v after 3 sweeps: its downstreams are told again and again (ghost edge)", got.NextTriggerAt)
	}
	// V ended; P waits for it: P's check is behind U in the flow lane.
	r.schedule(task.Spec{ID: "V"})
	for range 2 {
		r.sweep(r.s)
	}
	r.finish("V", true)
	r.schedule(task.Spec{ID: "P", After: []task.Ref{{ID: "V"}}})
	for range 5 {
		r.sweep(r.s)
	}
	if got := r.get("P"); got.Status == task.StatusPending {
		t.Errorf("P is still pending after 5 sweeps although its only upstream V succeeded before P existed")
	}
}

// orderAdd orders two concurrent AddUpstreams calls on T at the store: see R3.
type orderAdd struct {
	task.Store
	cEdges, bEdges, cWon chan struct{}
}

func hasUp(edges []task.Edge, id string) bool {
	for _, e := range edges {
		if e.Up.ID == id {
			return true
		}
	}
	return false
}

func (o *orderAdd) AddEdges(ctx context.Context, edges []task.Edge) error {
	if hasUp(edges, "X") { // B: after C's edges
		<-o.cEdges
		err := o.Store.AddEdges(ctx, edges)
		close(o.bEdges)
		return err
	}
	err := o.Store.AddEdges(ctx, edges)
	close(o.cEdges)
	return err
}

func (o *orderAdd) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	if len(t.After) == 1 { // C: writes once B has written its edges
		<-o.bEdges
		err := o.Store.AddUpstreams(ctx, t, prev, from)
		close(o.cWon)
		return err
	}
	<-o.cWon
	return o.Store.AddUpstreams(ctx, t, prev, from)
}

// two AddUpstreams racing on one task with a common upstream Y: the loser's edge write lands
// last and gives Y→T the loser's index; the loser then fails (Y is already an upstream), and T
// never learns that Y ended.
func TestFlowAddUpstreamsRaceCorruptsEdge(t *testing.T) {
	r := newRig(t, 0, 0)
	r.schedule(task.Spec{ID: "X"})
	r.schedule(task.Spec{ID: "Y"})
	r.schedule(task.Spec{ID: "T", Delay: ptrDur(time.Hour)})
	o := &orderAdd{Store: r.s, cEdges: make(chan struct{}), bEdges: make(chan struct{}), cWon: make(chan struct{})}
	fe := frontend.New(o, frontend.Config{Lambdas: task.FixedCatalog{r.l}, Task: r.cfg})
	var wg sync.WaitGroup
	var errB, errC error
	wg.Go(func() { _, errC = fe.AddUpstreams(t.Context(), "a", "T", []task.Ref{{ID: "Y"}}) })
	wg.Go(func() { _, errB = fe.AddUpstreams(t.Context(), "a", "T", []task.Ref{{ID: "X"}, {ID: "Y"}}) })
	wg.Wait()
	t.Logf("C (adds Y): %v; B (adds X, Y): %v", errC, errB)
	if got := r.get("T"); got.Status != task.StatusPending || len(got.After) != 1 {
		t.Fatalf("T: %s after %v; want pending after Y alone", got.Status, got.After)
	}
	r.sweep(r.s) // T's check (Y not ended) clears its trigger; Y is enqueued
	r.finish("Y", true)
	for range 3 {
		r.sweep(r.s)
	}
	if got := r.get("T"); got.Status == task.StatusPending {
		t.Errorf("T is still pending although its only upstream Y succeeded: the edge Y→T names the loser's index")
	}
}

func ptrDur(d time.Duration) *time.Duration { return &d }

// an upstream that ended past its retention is still read (TTL deletes late), so a downstream
// is accepted; TTL then deletes it before the downstream's check, which takes a missing upstream
// for one still running, clears the check trigger, and leaves the downstream pending forever.
func TestFlowExpiredUpstreamLeavesPendingForever(t *testing.T) {
	r := newRig(t, 0, time.Second) // retention 1 s: U's TTL has passed when D is scheduled
	r.schedule(task.Spec{ID: "U"})
	r.sweep(r.s)
	r.finish("U", true)
	time.Sleep(1500 * time.Millisecond)
	// DynamoDB keeps reading an expired item until TTL deletes it, within days.
	r.schedule(task.Spec{ID: "D", After: []task.Ref{{ID: "U"}}})
	// TTL deletes U's item now.
	if _, err := r.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: &r.table, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "task#a#U"}, "sk": &types.AttributeValueMemberS{Value: "task"}}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.sweep(r.s)
	}
	if got := r.get("D"); got.Status == task.StatusPending && got.NextTriggerAt == nil {
		t.Errorf("D is pending with no trigger: nothing will ever settle it (its upstream U expired)")
	}
}

// a downstream settled by an upstream that TTL then deletes runs without that upstream's
// result: its input says so (task.InputGone).
func TestFlowExpiredUpstreamInputLost(t *testing.T) {
	r := newRig(t, 0, 0)
	r.schedule(task.Spec{ID: "U1"})
	r.schedule(task.Spec{ID: "U2"})
	r.schedule(task.Spec{ID: "D", After: []task.Ref{{ID: "U1"}, {ID: "U2"}}})
	r.sweep(r.s)
	r.finish("U1", true)
	r.sweep(r.s)
	// 30 days pass (U2 is slow, or D's run_at is later): TTL deletes U1.
	if _, err := r.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: &r.table, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "task#a#U1"}, "sk": &types.AttributeValueMemberS{Value: "task"}}, ConditionExpression: aws.String("attribute_exists(pk)")}); err != nil {
		t.Fatal(err)
	}
	r.finish("U2", true)
	r.sweep(r.s)
	r.sweep(r.s)
	hsc := status.New(r.s, status.Config{Task: r.cfg})
	claimed, err := hsc.Claim(t.Context(), "a", "D", "", "")
	if err != nil {
		t.Fatalf("claim D: %v (D is %s)", err, r.get("D").Status)
	}
	for _, in := range claimed.Inputs {
		if in.Status != task.StatusSuccess && in.Error != task.InputGone {
			t.Errorf("D runs with input %s/%s of status %q, result %s and error %q: an upstream's result lost must say so", in.Lambda, in.ID, in.Status, in.Result, in.Error)
		}
	}
}
