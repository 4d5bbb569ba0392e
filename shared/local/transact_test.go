package local_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/testkit/history"
	"github.com/openatf/atf/shared/worker"
)

// Transactional enqueue: a task written in the app's own transaction, beside the app's own write
// (an order), exists if and only if that transaction commits, runs once through the consumer's
// sweep and the executor, and a replay of its id changes nothing.

// appTx writes an order and the task tk in one transaction of the app, committed if commit is
// set, and returns the transaction's error (task.ErrExists for a taken id). ordered reports
// whether the order was written.
type appTx struct {
	enqueue func(ctx context.Context, order string, tk task.Task, commit bool) error
	ordered func(ctx context.Context, order string) bool
}

func testTransactEnqueue(t *testing.T, b backend, tx appTx) {
	const lambda = "txn"
	h := &chaostest.History{}
	mux := worker.NewMux()
	mux.Handle(lambda, &chaostest.Recorder{History: h, Worker: "1", Work: chaostest.Sleep(0, nil)})
	c := chaostest.Start(t, local.Config{Mux: mux, Store: b.store, Queue: b.queue, Concurrency: 2, Task: chaostest.Timing(b.aws), MessageTimesLease: b.aws})
	ctx := t.Context()
	newTask := func(id string) task.Task {
		// Over dynamostore.InlinePayload, so that DynamoDB's entries hold a payload item too.
		payload := `{"note":"` + strings.Repeat("x", 2*dynamostore.InlinePayload) + `"}`
		tk, err := task.New(task.Spec{ID: id, Payload: []byte(payload)}, task.Lambda{Name: lambda}.WithDefaults(), time.Now().UTC(), task.Config{}.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}

	if err := tx.enqueue(ctx, "order-1", newTask("rolled-back"), false); err != nil {
		t.Fatalf("rolled back transaction: %v", err)
	}
	if _, err := b.store.Get(ctx, lambda, "rolled-back"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("task of a rolled back transaction: Get says %v, want task.ErrNotFound", err)
	}
	if tx.ordered(ctx, "order-1") {
		t.Error("the order of a rolled back transaction was written")
	}

	committed := newTask("committed")
	if err := tx.enqueue(ctx, "order-2", committed, true); err != nil {
		t.Fatalf("committed transaction: %v", err)
	}
	observed, final := chaostest.Wait(t, c, lambda, 1, waitFor(b, 1))
	if r := history.Check(h.Executions(), nil, observed, final, task.StatusSuccess); r.Tasks != 1 || r.Duplicates != 0 {
		t.Errorf("committed: %d tasks ran, %d duplicate executions; want the one task run once", r.Tasks, r.Duplicates)
	}

	// The replay, with its own order: refused as a whole, the task left as it was.
	if err := tx.enqueue(ctx, "order-3", newTask("committed"), true); !errors.Is(err, task.ErrExists) {
		t.Errorf("replayed id: the transaction says %v, want task.ErrExists", err)
	}
	if tx.ordered(ctx, "order-3") {
		t.Error("the order of the replayed transaction was written")
	}
	got, err := b.store.Get(ctx, lambda, "committed")
	if err != nil || got.Status != task.StatusSuccess || got.Attempts != 1 || string(got.Payload) != string(committed.Payload) {
		t.Errorf("after the replay: %s, %d attempts, payload intact %t, err %v; want success after one attempt", got.Status, got.Attempts, string(got.Payload) == string(committed.Payload), err)
	}
	if n := len(h.Executions()); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
	// The kept counts saw the task: created once, and moved on to success like any other.
	counts, err := b.store.Counts(ctx, lambda)
	if err != nil || counts[task.StatusSuccess] != 1 || counts[task.StatusNew] != 0 {
		t.Errorf("counts %v (err %v), want the one task counted as succeeded", counts, err)
	}
}

func TestTransactEnqueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atf.db")
	store, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	if _, err := app.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	testTransactEnqueue(t, backend{"embedded", store, memqueue.New(), false}, appTx{
		enqueue: func(ctx context.Context, order string, tk task.Task, commit bool) error {
			tx, err := app.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, order); err != nil {
				return err
			}
			if err := sqlitestore.CreateTx(ctx, tx, tk); err != nil {
				return err // the app rolls back: a replay leaves no order either
			}
			if !commit {
				return tx.Rollback()
			}
			return tx.Commit()
		},
		ordered: func(ctx context.Context, order string) bool {
			var n int
			if err := app.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ?`, order).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
	})
}

func TestTransactEnqueueAWS(t *testing.T) {
	b := awstest.NewBackend(t, "atf-txn", task.Lambda{Name: "txn"}.WithDefaults())
	table := b.Name
	orderKey := func(order string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "app-order#" + order}, "sk": &types.AttributeValueMemberS{Value: "order"}}
	}
	testTransactEnqueue(t, backend{"aws", b.Store, b.Queue, true}, appTx{
		enqueue: func(ctx context.Context, order string, tk task.Task, commit bool) error {
			items, err := b.Store.CreateTransactItems(tk)
			if err != nil {
				return err
			}
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: orderKey(order)}})
			if !commit {
				// The app's own condition fails (no such account), and cancels the transaction.
				items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
					TableName: &table, Key: orderKey("account"), ConditionExpression: aws.String("attribute_exists(pk)"),
				}})
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = b.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
			if err != nil {
				err = dynamostore.CreateRefused(err, tk, 0)
				var cancelled *types.TransactionCanceledException
				if !commit && errors.As(err, &cancelled) && aws.ToString(cancelled.CancellationReasons[len(items)-1].Code) == "ConditionalCheckFailed" {
					return nil // cancelled by the app's condition, as meant
				}
				return err
			}
			b.Store.Created(ctx, tk)
			return nil
		},
		ordered: func(ctx context.Context, order string) bool {
			out, err := b.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: orderKey(order), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			return out.Item != nil
		},
	})
}
