package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// writeUnits asks DynamoDB for the write units of every write call, by table and by index
// (ReturnConsumedCapacity INDEXES, which DynamoDB Local answers as DynamoDB charges an index:
// nothing when neither its keys nor its projected attributes change), and adds them up.
type writeUnits struct {
	mu    sync.Mutex
	calls []writeCall
}

// writeCall is what one write call consumed: on the table, and on each index it touched.
type writeCall struct {
	op, pk  string
	sk      string
	table   float64
	indexes map[string]float64
}

func (w *writeUnits) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("write-units", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			var op, pk, sk string
			switch p := in.Parameters.(type) {
			case *dynamodb.PutItemInput:
				op, pk, sk, p.ReturnConsumedCapacity = "PutItem", keyString(p.Item), sortKey(p.Item), types.ReturnConsumedCapacityIndexes
			case *dynamodb.UpdateItemInput:
				op, pk, sk, p.ReturnConsumedCapacity = "UpdateItem", keyString(p.Key), sortKey(p.Key), types.ReturnConsumedCapacityIndexes
			}
			out, md, err := next.HandleInitialize(ctx, in)
			var cc *types.ConsumedCapacity
			switch r := out.Result.(type) {
			case *dynamodb.PutItemOutput:
				cc = r.ConsumedCapacity
			case *dynamodb.UpdateItemOutput:
				cc = r.ConsumedCapacity
			}
			if cc != nil {
				c := writeCall{op: op, pk: pk, sk: sk, indexes: map[string]float64{}}
				if cc.Table != nil {
					c.table = aws.ToFloat64(cc.Table.CapacityUnits)
				}
				for name, ix := range cc.GlobalSecondaryIndexes {
					c.indexes[name] = aws.ToFloat64(ix.CapacityUnits)
				}
				w.mu.Lock()
				w.calls = append(w.calls, c)
				w.mu.Unlock()
			}
			return out, md, err
		}), middleware.After)
	})
}

func keyString(item map[string]types.AttributeValue) string {
	if v, ok := item["pk"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// sortKey is an item's sort key, "" if it has none.
func sortKey(item map[string]types.AttributeValue) string {
	if v, ok := item["sk"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// take returns the calls recorded since the last take.
func (w *writeUnits) take() []writeCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	calls := w.calls
	w.calls = nil
	return calls
}

// sum adds up calls' units on the table and on each index.
func sum(calls []writeCall) (table float64, indexes map[string]float64) {
	indexes = map[string]float64{}
	for _, c := range calls {
		table += c.table
		for name, u := range c.indexes {
			indexes[name] += u
		}
	}
	return table, indexes
}

// itemBytes is an item's size as DynamoDB counts it for write units: each attribute's name and
// value; a number about one byte per two digits, and one.
func itemBytes(item map[string]types.AttributeValue) int {
	size := 0
	for name, v := range item {
		size += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			size += len(v.Value)
		case *types.AttributeValueMemberB:
			size += len(v.Value)
		case *types.AttributeValueMemberN:
			size += (len(strings.TrimLeft(strings.Trim(v.Value, "0"), "-"))+1)/2 + 1
		case *types.AttributeValueMemberBOOL:
			size++
		}
	}
	return size
}

// TestWritesPerTask runs tasks through their life (schedule sent ahead, claim, heartbeats, result)
// and counts the write units DynamoDB Local reports for each step, on the table and on each
// index (docs/capacity.md, "Writes per task"). The list index is written once per task, when it
// is created: its keys never change and it projects nothing that does. A task sent ahead, its
// message sent before it is written, has no due entry; nor has a running one whose claim names
// its message, which times the lease (status.WithMessage), as AWS's workers do: its whole life
// writes the due index nothing. A lease the store times (a claim without its message) has a due
// entry, added by the claim, moved by each heartbeat and removed by the result. Each write of a
// task item with a small payload, up to InlinePayload, costs the table one unit: the item stays
// under 1 KB, also with a long collection name and the lease, spec and message id of a running
// task.
func TestWritesPerTask(t *testing.T) {
	ctx := t.Context()
	var w writeUnits
	db, table := newTable(t, nil, w.option)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "send-email", Priorities: []string{"high", "low"}}.WithDefaults()
	hsc := status.New(s, status.Config{})
	for _, c := range []struct {
		name       string
		payload    []byte
		collection string
		message    string // the id of the message that times the lease; "": the store times it
	}{
		{"small", []byte(`{"to":"a@example.com"}`), "password-reset", "5f0c6ab2-9d8e-4a37-b0a1-3c2d1e4f5a6b"},
		{"inline limit", []byte(`"` + strings.Repeat("x", dynamostore.InlinePayload-2) + `"`), strings.Repeat("c", 64), "5f0c6ab2-9d8e-4a37-b0a1-3c2d1e4f5a6b"},
		{"lease timed by the store", []byte(`{"to":"a@example.com"}`), "password-reset", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC()
			id := task.NewID(now)
			tk, err := task.New(task.Spec{ID: id, Payload: c.payload, Collection: c.collection, Priority: "high"}, l, now, task.Config{}.WithDefaults())
			if err != nil {
				t.Fatal(err)
			}
			w.take()
			// A step that is a transition costs what the product's model says it does (the atf dev
			// dashboard prices transitions with it): table, counter and indexes together.
			type step struct {
				name     string
				run      func() error
				from, to task.Status // "" to "" for a heartbeat, which is no transition
			}
			var lease string
			steps := []step{
				{"schedule", func() error {
					// Due now, so the schedule path creates it enqueued and sends it ahead.
					enq, m, err := task.EnqueueAhead(tk, now, task.Config{}.WithDefaults())
					if err != nil {
						return err
					}
					enq, _ = task.SendFirst(enq, m)
					return s.Create(ctx, enq)
				}, "", task.StatusEnqueued},
				{"claim", func() error {
					claimed, err := hsc.Claim(status.WithMessage(ctx, c.message), l.Name, id, "", "")
					lease = claimed.Lease
					return err
				}, task.StatusEnqueued, task.StatusProcessing},
				{"heartbeat 1", func() error { return hsc.Heartbeat(ctx, l.Name, id, lease) }, "", ""},
				{"heartbeat 2", func() error { return hsc.Heartbeat(ctx, l.Name, id, lease) }, "", ""},
				{"result", func() error {
					_, err := hsc.SetResult(ctx, l.Name, id, lease, status.Result{Outcome: status.Success, Result: []byte(`{"ok":true}`)})
					return err
				}, task.StatusProcessing, task.StatusSuccess},
			}
			var all []writeCall
			largest := 0
			for _, st := range steps {
				if err := st.run(); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				calls := w.take()
				all = append(all, calls...)
				tbl, ix := sum(calls)
				t.Logf("%-12s table %.0f, due %.0f, list %.0f WRU (%d write calls)", st.name, tbl, ix[dynamostore.DueIndex], ix[dynamostore.ListIndex], len(calls))
				for _, call := range calls {
					if call.table != 1 {
						t.Errorf("%s: %s of %s cost the table %.0f WRU, want 1: the item is over 1 KB", st.name, call.op, call.pk, call.table)
					}
				}
				if st.to != "" && c.message != "" {
					measured := tbl
					for _, u := range ix {
						measured += u
					}
					if want := cost.TransitionUnits(st.from, st.to).Write; measured != want {
						t.Errorf("%s (%q to %s) took %.0f WRU; cost.TransitionUnits says %.0f: change the model (shared/cost/units.go, docs/capacity.md) with the write path",
							st.name, st.from, st.to, measured, want)
					}
				}
				// The due entry of a lease the store times: none at schedule, added by the claim,
				// moved by each heartbeat, removed by the result. A message timing it: none.
				wantDue := map[string]float64{"schedule": 0, "claim": 1, "result": 1}[st.name]
				if strings.HasPrefix(st.name, "heartbeat") {
					wantDue = 2
				}
				if c.message != "" {
					wantDue = 0
				}
				if u := ix[dynamostore.DueIndex]; u != wantDue {
					t.Errorf("%s wrote the due index %.0f WRU, want %.0f", st.name, u, wantDue)
				}
				if st.name != "schedule" {
					if u := ix[dynamostore.ListIndex]; u != 0 {
						t.Errorf("%s wrote the list index (%.0f WRU): only a create should", st.name, u)
					}
				}
				item, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
					Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "task#" + l.Name + "#" + id}, "sk": &types.AttributeValueMemberS{Value: "task"}}})
				if err != nil {
					t.Fatal(err)
				}
				largest = max(largest, itemBytes(item.Item))
			}
			tbl, ix := sum(all)
			names := slices.Sorted(maps.Keys(ix))
			var parts []string
			total := tbl
			for _, n := range names {
				parts = append(parts, fmt.Sprintf("%s %.0f", n, ix[n]))
				total += ix[n]
			}
			t.Logf("a task with a %d-byte payload: %.0f WRU: table %.0f (counters included), %s; its task item at most %d bytes",
				len(c.payload), total, tbl, strings.Join(parts, ", "), largest)
			if u := ix[dynamostore.ListIndex]; u != 1 {
				t.Errorf("the list index took %.0f WRU over the task's life, want 1 (its create)", u)
			}
			// 7 for schedule, claim and result with their counters, 1 for each heartbeat; a
			// lease the store times, 9 and 3.
			want := 7.0 + 2*1
			if c.message == "" {
				want = 9.0 + 2*3
			}
			if total != want {
				t.Errorf("a task's life took %.0f WRU, want %.0f", total, want)
			}
			if largest >= 1024 || math.IsNaN(total) {
				t.Errorf("the task item reached %d bytes, want under 1 KB", largest)
			}
		})
	}
}

// TestWritesPerTaskInBatches runs tasks through their life as make bench does: created by one
// schedule request, claimed by one batch of the status function (the records of one SQS batch)
// and ended by another. The counter writes of each batch go out summed into one counter item of
// its lambda, so a task's share of them is 3 / batch instead of 3: here 10 tasks on 4 shards pay
// 3 counter writes, not 30 (docs/capacity.md, "Writes per task").
func TestWritesPerTaskInBatches(t *testing.T) {
	ctx := t.Context()
	var w writeUnits
	db, table := newTable(t, nil, w.option)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "send-email"}.WithDefaults()
	h := statusfn.NewHandler(status.New(s, status.Config{}), nil)
	const n = 10
	now := time.Now().UTC()
	var tasks []task.Task
	for range n {
		tk, err := task.New(task.Spec{ID: task.NewID(now), Payload: []byte(`{"to":"a@example.com"}`)}, l, now, task.Config{}.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if tk, _, err = task.EnqueueAhead(tk, now, task.Config{}.WithDefaults()); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	w.take()
	if err := s.CreateBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	serve := func(op statusfn.Op, leases []string) []string {
		t.Helper()
		batch := statusfn.Request{V: statusfn.BatchVersion}
		for i, tk := range tasks {
			req := statusfn.Request{V: statusfn.Version, Op: op, Lambda: l.Name, TaskID: tk.ID}
			if op == statusfn.OpSetResult {
				req.Lease, req.Outcome = leases[i], status.Success
			} else {
				req.MessageID = "message-" + tk.ID // as a worker function's claims: the message times the lease
			}
			batch.Requests = append(batch.Requests, req)
		}
		resp, err := h.Handle(ctx, batch)
		if err != nil || len(resp.Responses) != n {
			t.Fatalf("%s batch: %+v, %v", op, resp, err)
		}
		out := make([]string, n)
		for i, r := range resp.Responses {
			if r.Error != nil {
				t.Fatalf("%s of %s: %+v", op, tasks[i].ID, r.Error)
			}
			out[i] = r.Lease
		}
		return out
	}
	serve(statusfn.OpSetResult, serve(statusfn.OpClaim, nil))

	calls := w.take()
	counters := 0
	for _, c := range calls {
		if strings.HasPrefix(c.pk, "count#") {
			counters++
		}
	}
	tbl, ix := sum(calls)
	total := tbl
	for _, u := range ix {
		total += u
	}
	t.Logf("%d tasks in batches: %.1f WRU per task beside the create's transaction (table %.0f with %d counter writes, due %.0f)",
		n, total/n, tbl, counters, ix[dynamostore.DueIndex])
	if counters != 3 {
		t.Errorf("the create and the two batches made %d counter writes, want 3: one per batch and lambda", counters)
	}
	// Claim 2 (its item, and the resend entry it removes: these tasks were not sent first) and
	// result 1, and the task's share of the counters. (The create's transaction, 4 WRU a task, is
	// left out: DynamoDB Local reports a transaction's units as if it held one item; make bench
	// prices it by its items.)
	if want := 3 + 3.0/n; total/n > want {
		t.Errorf("a task's claim, result and counts in batches took %.2f WRU, want at most %.2f", total/n, want)
	}
	got, err := s.Counts(ctx, l.Name)
	if err != nil || !maps.Equal(got, map[task.Status]int{task.StatusSuccess: n}) {
		t.Errorf("Counts after the batches: %v, %v; want %d success", got, err, n)
	}
}

// TestCreateTableOldIndex: CreateTable on a table an older version made, with the list index of
// before, says so and points to the upgrade, where the store would fail at its first list.
func TestCreateTableOldIndex(t *testing.T) {
	ctx := t.Context()
	cfg := awstest.Config(t, "DYNAMODB")
	db := awstest.NewDynamoDB(cfg)
	table := awstest.Name("atf-test")
	old := dynamostore.TableInput(table)
	for i, g := range old.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) == dynamostore.ListIndex {
			old.GlobalSecondaryIndexes[i].IndexName = aws.String("list")
			old.GlobalSecondaryIndexes[i].Projection.NonKeyAttributes = []string{"id", "status", "coll"}
		}
	}
	if _, err := db.CreateTable(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dynamostore.DeleteTable(context.Background(), db, table) })
	err := dynamostore.CreateTable(ctx, db, table)
	if err == nil || !strings.Contains(err.Error(), "no index "+dynamostore.ListIndex) || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("CreateTable on a table with the old list index: %v; want an error naming %s and the upgrade", err, dynamostore.ListIndex)
	}
}

// TestWritesPerFailedAttempt: a failed attempt's record (an attempt item, docs/capacity.md,
// "Attempt history") costs one write unit beside the transition that ends the attempt, with a
// short error and a worker named as a worker function names itself (its log stream), and a
// success writes none.
func TestWritesPerFailedAttempt(t *testing.T) {
	ctx := status.WithWorker(t.Context(), "2026/11/28/[$LATEST]0123456789abcdef0123456789abcdef")
	var w writeUnits
	db, table := newTable(t, nil, w.option)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "send-email"}.WithDefaults()
	hsc := status.New(s, status.Config{})
	now := time.Now().UTC()
	id := task.NewID(now)
	tk, err := task.New(task.Spec{ID: id, Payload: []byte(`{"to":"a@example.com"}`)}, l, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, outcome := range []status.Outcome{status.Retriable, status.Success} {
		// The first time the task is created enqueued; then its retry is enqueued.
		_, err := task.Apply(ctx, s, l.Name, id, func(cur task.Task) (task.Task, error) {
			return task.Enqueue(cur, time.Now().UTC().Add(time.Hour), task.Config{}.WithDefaults())
		})
		if errors.Is(err, task.ErrNotFound) {
			enq, _ := task.Enqueue(tk, now, task.Config{}.WithDefaults())
			err = s.Create(ctx, enq)
		}
		if err != nil {
			t.Fatal(err)
		}
		claimed, err := hsc.Claim(ctx, l.Name, id, "", "")
		if err != nil {
			t.Fatal(err)
		}
		w.take()
		if _, err := hsc.SetResult(ctx, l.Name, id, claimed.Lease, status.Result{Outcome: outcome, Error: "connection refused by smtp.example.com:25"}); err != nil {
			t.Fatal(err)
		}
		var records []writeCall
		for _, c := range w.take() {
			if c.pk == "task#"+l.Name+"#"+id && strings.HasPrefix(c.sk, "attempt#") {
				records = append(records, c)
			}
		}
		t.Logf("%s: %d attempt item(s) written: %+v", outcome, len(records), records)
		switch {
		case outcome == status.Success && len(records) != 0:
			t.Errorf("a success wrote %d attempt items, want none", len(records))
		case outcome == status.Retriable && (len(records) != 1 || records[0].table != 1):
			t.Errorf("a failed attempt wrote %+v, want one attempt item of 1 WRU", records)
		}
	}
}
