package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awsmeter"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// newTable creates a table for one test on the endpoint the environment names, and deletes it
// when the test ends. The meter, if given, sees every call of the returned client.
func newTable(t *testing.T, meter *awsmeter.Meter, opts ...func(*dynamodb.Options)) (*dynamodb.Client, string) {
	t.Helper()
	cfg := awstest.Config(t, "DYNAMODB")
	if meter != nil {
		meter.Attach(&cfg)
	}
	db := awstest.NewDynamoDB(cfg, opts...)
	table := awstest.Name("atf-test")
	if err := dynamostore.CreateTable(t.Context(), db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dynamostore.DeleteTable(context.Background(), db, table) })
	return db, table
}

func newStore(t *testing.T, db *dynamodb.Client, c dynamostore.Config) *dynamostore.Store {
	t.Helper()
	s, err := dynamostore.New(db, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	db, table := newTable(t, nil)
	storetest.Exercise(t, func(t *testing.T) task.Store {
		return newStore(t, db, dynamostore.Config{Table: table})
	}, storetest.Fan(emulatorFan), storetest.Transact(func(t *testing.T, s task.Store, tk task.Task, commit bool) error {
		return appTx(t, db, table, s.(*dynamostore.Store), tk, commit)
	}))
}

// appTx writes an item of the app's own and tk in one TransactWriteItems. Unless commit is set,
// a condition of the app's fails (no such account), cancelling the transaction.
func appTx(t *testing.T, db *dynamodb.Client, table string, s *dynamostore.Store, tk task.Task, commit bool) error {
	ctx := t.Context()
	items, err := s.CreateTransactItems(tk)
	if err != nil {
		return err
	}
	appKey := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "app#" + id}, "sk": &types.AttributeValueMemberS{Value: "app"}}
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: appKey(tk.Lambda + "#" + tk.ID)}})
	if !commit {
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName: &table, Key: appKey("account"), ConditionExpression: aws.String("attribute_exists(pk)"),
		}})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err = dynamostore.CreateRefused(err, tk, 0); err != nil {
		var cancelled *types.TransactionCanceledException
		if !commit && errors.As(err, &cancelled) && aws.ToString(cancelled.CancellationReasons[len(items)-1].Code) == "ConditionalCheckFailed" {
			return nil // cancelled by the app's condition, as meant
		}
		return err
	}
	s.Created(ctx, tk)
	return nil
}

// emulatorFan is the fan-in and fan-out the conformance suite runs on DynamoDB: issue 12 asks
// 1,000 of the emulators (task.MaxAfter of the embedded store).
const emulatorFan = 1000

// TestConformanceOneShard runs the suite with every lambda on one shard, and with a lambda
// whose shard count was raised, so both ends of the sharding are covered.
func TestConformanceOneShard(t *testing.T) {
	db, table := newTable(t, nil)
	storetest.Exercise(t, func(t *testing.T) task.Store {
		return newStore(t, db, dynamostore.Config{Table: table, Shards: 1, LambdaShards: map[string]int{"busy": 9}})
	}, storetest.Fan(emulatorFan))
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  dynamostore.Config
		want string
	}{
		{dynamostore.Config{}, "Table"},
		{dynamostore.Config{Table: "t1"}, "Table"},
		{dynamostore.Config{Table: "atf dev"}, "Table"},
		{dynamostore.Config{Table: "atf-t", Shards: -1}, "Shards"},
		{dynamostore.Config{Table: "atf-t", Shards: dynamostore.MaxShards + 1}, "Shards"},
		{dynamostore.Config{Table: "atf-t", LambdaShards: map[string]int{"a": 0}}, "LambdaShards[a]"},
		{dynamostore.Config{Table: "atf-t", Retention: -time.Hour}, "Retention"},
	} {
		if _, err := dynamostore.New(nil, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): got %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

func newTask(t *testing.T, l task.Lambda, id string, payload []byte, now time.Time) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id, Payload: payload}, l, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestShardSpread shows a busy lambda's index entries spread over every shard, so no single
// index partition takes all of its writes.
func TestShardSpread(t *testing.T) {
	const shards, tasks = 8, 800
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: shards})
	l := task.Lambda{Name: "spread"}.WithDefaults()
	now := time.Now().UTC()
	var batch []task.Task
	for i := range tasks {
		batch = append(batch, newTask(t, l, fmt.Sprintf("t-%d", i), nil, now))
		if len(batch) == task.MaxBatch {
			if err := s.CreateBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for _, idx := range []struct{ name, pk, prefix string }{
		{dynamostore.DueIndex, "due_pk", "due#spread#"},
		{dynamostore.ListIndex, "list_pk", "list#spread#"},
	} {
		total := 0
		for shard := range shards {
			out, err := db.Query(ctx, &dynamodb.QueryInput{
				TableName: &table, IndexName: aws.String(idx.name), Select: types.SelectCount,
				KeyConditionExpression:    aws.String(idx.pk + " = :pk"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: fmt.Sprint(idx.prefix, shard)}},
			})
			if err != nil {
				t.Fatal(err)
			}
			n := int(out.Count)
			total += n
			// A fair hash puts 100 on each shard; allow wide noise, but no empty or doubled shard.
			if n < tasks/shards/2 || n > 2*tasks/shards {
				t.Errorf("%s index, shard %d: %d entries of %d, want about %d", idx.name, shard, n, tasks, tasks/shards)
			}
		}
		if total != tasks {
			t.Errorf("%s index: %d entries in all, want %d", idx.name, total, tasks)
		}
	}
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Priority: l.DefaultPriority(), Statuses: []task.Status{task.StatusNew}, Before: now.Add(time.Second), Limit: 1000})
	if err != nil || len(due) != tasks {
		t.Fatalf("Due over %d shards: got %d tasks, %v; want %d", shards, len(due), err, tasks)
	}
}

// TestStaleDueEntry plays the due index lagging behind the table, as a global index may: the
// entry still says due, the task has moved on. Due must not return it, and a transition computed
// from the stale view must not apply.
func TestStaleDueEntry(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 2})
	l := task.Lambda{Name: "stale"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC().Truncate(time.Microsecond)
	stale := newTask(t, l, "s1", nil, now.Add(-time.Minute))
	if err := s.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	enq, err := task.Enqueue(stale, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enq, stale.Version); err != nil {
		t.Fatal(err)
	}
	// Put the old index keys back on the enqueued item: the index now shows a due new task.
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "task#stale#s1"}, "sk": &types.AttributeValueMemberS{Value: "task"}}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	item := got.Item
	dueSK := item["due_sk"].(*types.AttributeValueMemberS).Value
	item["due_sk"] = &types.AttributeValueMemberS{Value: strings.Replace(dueSK, fmt.Sprintf("%019d", enq.NextTriggerAt.UnixNano()), fmt.Sprintf("%019d", stale.NextTriggerAt.UnixNano()), 1)}
	item["status"] = &types.AttributeValueMemberS{Value: string(task.StatusNew)} // as projected
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
		t.Fatal(err)
	}
	// The index entry is due and says new; the item's next trigger is in the future.
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Priority: l.DefaultPriority(), Statuses: []task.Status{task.StatusNew}, Before: now, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 0 {
		t.Errorf("Due returned %v for an entry whose task is not due", due)
	}
	// A consumer that acted on the stale read (version 1) cannot move the task again.
	again, err := task.Enqueue(stale, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, again, stale.Version); !errors.Is(err, task.ErrConflict) {
		t.Errorf("Update from the stale version: got %v, want ErrConflict", err)
	}
}

// TestBadInput shows what bad input becomes: domain errors, never an SDK error.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "bad"}.WithDefaults()
	now := time.Now().UTC()

	// Payload and result each at the API's limit: together they are over DynamoDB's 400 KB, but
	// the payload has an item of its own.
	big := []byte(`"` + strings.Repeat("x", task.DefaultPayloadLimit-2) + `"`)
	tk := newTask(t, l, "big", big, now)
	if err := s.Create(ctx, tk); err != nil {
		t.Fatalf("Create with a payload at the limit: %v", err)
	}
	done := tk
	done.Status, done.Result, done.NextTriggerAt, done.Version = task.StatusSuccess, big, nil, tk.Version+1
	if err := s.Update(ctx, done, tk.Version); err != nil {
		t.Errorf("Update with a result at the limit: %v", err)
	}
	if got := mustGet(t, s, l.Name, "big"); len(got.Payload) != len(big) || len(got.Result) != len(big) {
		t.Errorf("Get: a %d-byte payload and a %d-byte result, want %d bytes each", len(got.Payload), len(got.Result), len(big))
	}
	huge := newTask(t, l, "huge", nil, now)
	huge.Payload = []byte(`"` + strings.Repeat("y", 420_000) + `"`)
	if err := s.Create(ctx, huge); !errors.Is(err, task.ErrTooLarge) {
		t.Errorf("Create over 400 KB: got %v, want ErrTooLarge", err)
	}
	if _, err := s.Get(ctx, l.Name, "huge"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get after a Create over 400 KB: got %v, want ErrNotFound", err)
	}
	hugeResult := done
	hugeResult.ID, hugeResult.Result = "huge-result", huge.Payload
	if err := s.Create(ctx, hugeResult); !errors.Is(err, task.ErrTooLarge) {
		t.Errorf("Create with a result over 400 KB: got %v, want ErrTooLarge", err)
	}
	var batch []task.Task
	for i := range 20 { // 20 × 256 KiB: the payloads are outside the transaction's 4 MB
		batch = append(batch, newTask(t, l, fmt.Sprint("b", i), big, now))
	}
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Errorf("CreateBatch of 20 payloads at the limit: %v", err)
	}
	if got := mustGet(t, s, l.Name, "b19"); len(got.Payload) != len(big) {
		t.Errorf("Get b19: a %d-byte payload, want %d", len(got.Payload), len(big))
	}

	forged := newTask(t, l, "ok", nil, now)
	for _, c := range []struct{ lambda, id string }{{"bad#x", "ok"}, {"bad", "a#b"}, {"", "x"}, {"bad", ""}, {"BAD", "x"}} {
		f := forged
		f.Lambda, f.ID = c.lambda, c.id
		if err := s.Create(ctx, f); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("Create %q/%q: got %v, want ErrInvalid", c.lambda, c.id, err)
		}
		if _, err := s.Get(ctx, c.lambda, c.id); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("Get %q/%q: got %v, want ErrNotFound", c.lambda, c.id, err)
		}
		if err := s.Update(ctx, f, 1); !errors.Is(err, task.ErrConflict) {
			t.Errorf("Update %q/%q: got %v, want ErrConflict", c.lambda, c.id, err)
		}
	}
	if tasks, _, err := s.List(ctx, task.ListParams{Lambda: "no#pe"}); err != nil || len(tasks) != 0 {
		t.Errorf("List of an invalid lambda: got %v, %v; want nothing", tasks, err)
	}
}

// TestResultTooLarge runs a task whose result fits the configured limit but not in a DynamoDB
// item: the run ends as a fatal failure that says so, rather than retrying a write that can never
// succeed.
func TestResultTooLarge(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "big"}.WithDefaults()
	cfg := task.Config{PayloadLimit: 1 << 20}.WithDefaults()
	if err := s.Create(ctx, newTask(t, l, "r1", []byte(`{}`), time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
	enq, err := task.Enqueue(mustGet(t, s, l.Name, "r1"), time.Now().UTC(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enq, enq.Version-1); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(s, status.Config{Task: cfg})
	claimed, err := hsc.Claim(ctx, l.Name, "r1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := hsc.Heartbeat(ctx, l.Name, "r1", claimed.Lease); err != nil {
		t.Fatal(err)
	}
	huge := []byte(`"` + strings.Repeat("x", 500_000) + `"`)
	done, err := hsc.SetResult(ctx, l.Name, "r1", claimed.Lease, status.Result{Outcome: status.Success, Result: huge})
	if err != nil || done.Status != task.StatusFatalFailure || !strings.Contains(done.Error, "does not fit") {
		t.Fatalf("SetResult: %s %q, %v; want fatal_failure saying the result does not fit", done.Status, done.Error, err)
	}
	if got := mustGet(t, s, l.Name, "r1"); got.Status != task.StatusFatalFailure || got.Result != nil {
		t.Errorf("stored: %s with a %d-byte result, want fatal_failure without a result", got.Status, len(got.Result))
	}
}

func mustGet(t *testing.T, s task.Store, lambda, id string) task.Task {
	t.Helper()
	got, err := s.Get(t.Context(), lambda, id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// throttle makes the first n calls of every operation fail as DynamoDB fails a throttled call.
func throttle(n int) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		seen := 0
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("throttle", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if seen++; seen <= n {
					return middleware.FinalizeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "injected"}
				}
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
		})
	}
}

// TestThrottling shows throttled calls retried with backoff, and persistent throttling ending as
// task.ErrThrottled.
func TestThrottling(t *testing.T) {
	ctx := t.Context()
	l := task.Lambda{Name: "throttled"}.WithDefaults()
	now := time.Now().UTC()

	var meter awsmeter.Meter
	db, table := newTable(t, &meter)
	s := newStore(t, db, dynamostore.Config{Table: table})
	// A client of the same table whose first 3 tries of a call are throttled.
	cfg := awstest.Config(t, "DYNAMODB")
	meter.Attach(&cfg)
	meter.Reset()
	flaky := newStore(t, dynamostore.NewClient(cfg, throttle(3)), dynamostore.Config{Table: table})
	tk := newTask(t, l, "t1", nil, now)
	if err := flaky.Create(ctx, tk); err != nil {
		t.Fatalf("Create through 3 throttled tries: %v", err)
	}
	if c := meter.Counts()[awsmeter.Op{Service: "DynamoDB", Operation: "PutItem"}]; c.Calls != 1 || c.Attempts != 4 {
		t.Errorf("PutItem: %d calls, %d attempts; want 1 call in 4 attempts", c.Calls, c.Attempts)
	}
	if _, err := s.Get(ctx, l.Name, "t1"); err != nil {
		t.Errorf("Get after the throttled Create: %v", err)
	}

	quick := func(o *dynamodb.Options) { o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, time.Millisecond) }
	always := newStore(t, dynamostore.NewClient(cfg, throttle(1000), quick), dynamostore.Config{Table: table})
	if _, err := always.Get(ctx, l.Name, "t1"); !errors.Is(err, task.ErrThrottled) {
		t.Errorf("Get while always throttled: got %v, want ErrThrottled", err)
	}
}

// TestCalls pins down what the hot paths cost in calls: the consumer's sweep reads each shard
// once per priority, and one batch read fetches the due tasks.
func TestCalls(t *testing.T) {
	ctx := t.Context()
	var meter awsmeter.Meter
	db, table := newTable(t, &meter)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 4})
	l := task.Lambda{Name: "calls"}.WithDefaults()
	now := time.Now().UTC()
	var batch []task.Task
	for i := range 30 {
		batch = append(batch, newTask(t, l, fmt.Sprint("c", i), []byte(`{}`), now))
	}
	meter.Reset()
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if n := meter.Calls("DynamoDB", "TransactWriteItems"); n != 1 {
		t.Errorf("CreateBatch of 30: %d TransactWriteItems calls, want 1", n)
	}

	// The write units of docs/capacity.md, as DynamoDB (Local) reports them: a new task writes
	// the table and both indexes; a transition moves its due entry (delete and put) and leaves
	// its list entry alone (TestWritesPerTask has a task's whole life).
	meter.Reset()
	if err := s.Create(ctx, newTask(t, l, "one", []byte(`{}`), now)); err != nil {
		t.Fatal(err)
	}
	if w := meter.Counts()[awsmeter.Op{Service: "DynamoDB", Operation: "PutItem"}].Write; w != 3 {
		t.Errorf("Create: %.1f write units, want 3 (table, due, list)", w)
	}
	meter.Reset()
	enq, err := task.Enqueue(batch[0], now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enq, batch[0].Version); err != nil {
		t.Fatal(err)
	}
	if w := meter.Counts()[awsmeter.Op{Service: "DynamoDB", Operation: "UpdateItem"}].Write; w != 4 {
		t.Errorf("enqueue: %.1f write units, want 4 (table, due delete and put, the counters)", w)
	}
	meter.Reset()
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Priority: l.DefaultPriority(), Statuses: []task.Status{task.StatusNew}, Before: now.Add(time.Second), Limit: 500})
	if err != nil || len(due) != 30 {
		t.Fatalf("Due: %d tasks, %v; want 30", len(due), err)
	}
	if q, b := meter.Calls("DynamoDB", "Query"), meter.Calls("DynamoDB", "BatchGetItem"); q != 4 || b != 1 {
		t.Errorf("Due: %d queries and %d batch reads, want 4 (one per shard) and 1\n%s", q, b, &meter)
	}
}

// staleDue answers Due with what the store said the first time: a due index that lags behind
// the table by a whole sweep.
type staleDue struct {
	task.Store
	seen []task.Task
}

func (s *staleDue) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if s.seen == nil {
		var err error
		if s.seen, err = s.Store.Due(ctx, p); err != nil {
			return nil, err
		}
	}
	var out []task.Task
	for _, t := range s.seen {
		if (p.Priority == "" || t.Priority == p.Priority) && slices.Contains(p.Statuses, t.Status) {
			out = append(out, t)
		}
	}
	return out, nil
}

// TestSweepStaleDue runs the consumer twice on a view of the due index that went stale after the
// first sweep, and alongside a consumer on a fresh view: every task is enqueued exactly once.
func TestSweepStaleDue(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 3})
	l := task.Lambda{Name: "sweep", Priorities: []string{"only"}}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	var batch []task.Task
	for i := range 40 {
		batch = append(batch, newTask(t, l, fmt.Sprint("s", i), nil, now.Add(-time.Second)))
	}
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	queue := memqueue.New()
	stale := &staleDue{Store: s}
	sweep := func(st task.Store) consumer.Stats {
		c := consumer.New(st, queue, consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Now: func() time.Time { return now }})
		stats, err := c.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return stats
	}
	first, again, fresh := sweep(stale), sweep(stale), sweep(s)
	if first.Enqueued != 40 || again.Enqueued != 0 || fresh.Enqueued != 0 {
		t.Errorf("enqueued %d, then %d from the stale view and %d from a fresh one; want 40, 0, 0", first.Enqueued, again.Enqueued, fresh.Enqueued)
	}
	seen := map[string]int{}
	for {
		ds, err := queue.Receive(ctx, task.ReceiveParams{Lambda: l.Name, Priority: "only", Max: 10, Visibility: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			seen[d.TaskID]++
		}
	}
	for _, tk := range batch {
		got, err := s.Get(ctx, l.Name, tk.ID)
		if err != nil || got.Status != task.StatusEnqueued || got.Version != tk.Version+1 || seen[tk.ID] != 1 {
			t.Errorf("%s: status %s, version %d, %d messages (%v); want enqueued once, version %d, 1 message", tk.ID, got.Status, got.Version, seen[tk.ID], err, tk.Version+1)
		}
	}
}

// afterQuery runs *fn right after the next Query the client makes, then clears it: a write that
// lands between two queries of one Due or List.
func afterQuery(fn *func()) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("hook", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if f := *fn; awsmiddleware.GetOperationName(ctx) == "Query" && f != nil {
					*fn = nil
					f()
				}
				return out, md, err
			}), middleware.After)
		})
	}
}

// TestIndexMovesMidQuery moves a task between the queries of one Due (from the waiting lane to
// the running one) and of one List (to another status): the task counts once, as it now is.
func TestIndexMovesMidQuery(t *testing.T) {
	var hook func()
	db, table := newTable(t, nil, afterQuery(&hook))
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 1})
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	l := task.Lambda{Name: "moving"}.WithDefaults()
	tk := newTask(t, l, "a", nil, now.Add(-time.Minute))
	if err := s.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, now.Add(-time.Minute), cfg)
	if err := s.Update(t.Context(), enq, tk.Version); err != nil {
		t.Fatal(err)
	}
	claimed, _ := task.Claim(enq, "lease", now.Add(-time.Minute), cfg)
	hook = func() { s.Update(context.Background(), claimed, enq.Version) }
	due, err := s.Due(t.Context(), task.DueParams{Lambda: l.Name, Statuses: task.Statuses, Before: now.Add(time.Hour), Limit: 10})
	if err != nil || len(due) != 1 || due[0].Status != task.StatusProcessing {
		t.Fatalf("Due: %v, %v; want the task once, processing", due, err)
	}

	ended, _ := task.Succeed(claimed, "lease", nil, now, cfg)
	hook = func() { s.Update(context.Background(), ended, claimed.Version) }
	listed, _, err := s.List(t.Context(), task.ListParams{Lambda: l.Name, Status: task.StatusProcessing})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range listed {
		if got.Status != task.StatusProcessing {
			t.Errorf("List of processing tasks returned one that is %s", got.Status)
		}
	}
}

// TestShardsPerLambda: a busy lambda's many shards cost only its own queries.
func TestShardsPerLambda(t *testing.T) {
	var meter awsmeter.Meter
	db, table := newTable(t, &meter)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 1, LambdaShards: map[string]int{"busy": 64}})
	for _, c := range []struct {
		lambda  string
		queries int
	}{{"idle", 1}, {"busy", 64}} {
		meter.Reset()
		if _, err := s.Due(t.Context(), task.DueParams{Lambda: c.lambda, Priority: "normal", Statuses: []task.Status{task.StatusNew}, Before: time.Now(), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if n := meter.Calls("DynamoDB", "Query"); n != c.queries {
			t.Errorf("Due of %s: %d queries, want %d", c.lambda, n, c.queries)
		}
	}
}

// TestTransitionWritesOnlyState runs a task with a payload at the limit through a heartbeat and
// its result: each transition writes the small state item alone, never the payload again. A
// heartbeat costs the table 1 write unit plus its index entries (docs/capacity.md), not one unit
// per KB of payload.
func TestTransitionWritesOnlyState(t *testing.T) {
	ctx := t.Context()
	var meter awsmeter.Meter
	db, table := newTable(t, &meter)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "heavy"}.WithDefaults()
	big := []byte(`"` + strings.Repeat("x", task.DefaultPayloadLimit-2) + `"`)
	if err := s.Create(ctx, newTask(t, l, "h1", big, time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
	enq, err := task.Enqueue(mustGet(t, s, l.Name, "h1"), time.Now().UTC(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enq, enq.Version-1); err != nil {
		t.Fatal(err)
	}
	written := func() float64 {
		var w float64
		for op, c := range meter.Counts() {
			if op.Service == "DynamoDB" {
				w += c.Write
			}
		}
		return w
	}
	read := func() float64 {
		var r float64
		for op, c := range meter.Counts() {
			if op.Service == "DynamoDB" {
				r += c.Read
			}
		}
		return r
	}
	hsc := status.New(s, status.Config{})
	meter.Reset()
	claimed, err := hsc.Claim(ctx, l.Name, "h1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if string(claimed.Payload) != string(big) {
		t.Fatalf("claim: a %d-byte payload, want the %d bytes scheduled", len(claimed.Payload), len(big))
	}
	// The claim starts the task: the table item, the due entry moved (delete and put), the list
	// entry, and the counters of the statuses it moves between; never the payload.
	if w := written(); w > 5 {
		t.Errorf("claim of a task with a %d-byte payload: %.0f write units, want at most 5\n%s", len(big), w, &meter)
	}
	for i := range 3 {
		meter.Reset()
		if err := hsc.Heartbeat(ctx, l.Name, "h1", claimed.Lease); err != nil {
			t.Fatal(err)
		}
		// The table item and the due entry moved (delete and put): a claim starts the task, so no
		// heartbeat changes its status (no counter), and the list entry holds nothing that changes.
		if w := written(); w > 3 {
			t.Errorf("heartbeat %d of a task with a %d-byte payload: %.0f write units, want at most 3\n%s", i+1, len(big), w, &meter)
		}
		// And it reads the task item alone: the payload item is for the claim.
		if r := read(); r > 1 {
			t.Errorf("heartbeat %d of a task with a %d-byte payload: %.0f read units, want 1\n%s", i+1, len(big), r, &meter)
		}
	}
	meter.Reset()
	done, err := hsc.SetResult(ctx, l.Name, "h1", claimed.Lease, status.Result{Outcome: status.Success, Result: []byte(`{"ok":true}`)})
	if err != nil || done.Status != task.StatusSuccess {
		t.Fatalf("SetResult: %s, %v", done.Status, err)
	}
	if got := mustGet(t, s, l.Name, "h1"); got.Status != task.StatusSuccess || string(got.Payload) != string(big) || string(got.Result) != `{"ok":true}` {
		t.Errorf("stored: %s with a %d-byte payload and result %s; want success, the payload and the result", got.Status, len(got.Payload), got.Result)
	}
}

// TestPayloadItem checks the layout of a task with a large payload: the payload in an item of its
// own beside the task item, which a taken id's Create leaves alone and cleans up after, and which
// gets the task item's TTL when the task ends. A small payload stays in the task item.
func TestPayloadItem(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "layout"}.WithDefaults()
	now := time.Now().UTC()
	items := func(id string) map[string]map[string]types.AttributeValue {
		t.Helper()
		out, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: &table, ConsistentRead: aws.Bool(true), KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "task#layout#" + id}},
		})
		if err != nil {
			t.Fatal(err)
		}
		bySK := map[string]map[string]types.AttributeValue{}
		for _, item := range out.Items {
			bySK[strings.SplitN(item["sk"].(*types.AttributeValueMemberS).Value, "#", 2)[0]] = item
		}
		if len(bySK) != len(out.Items) {
			t.Fatalf("task %s has %d items: two payload items", id, len(out.Items))
		}
		return bySK
	}

	small := []byte(`{"n":"` + strings.Repeat("s", dynamostore.InlinePayload-8) + `"}`)
	if err := s.Create(ctx, newTask(t, l, "small", small, now)); err != nil {
		t.Fatal(err)
	}
	if got := items("small"); len(got) != 1 || got["task"]["payload"] == nil {
		t.Errorf("a %d-byte payload: items %v, want the task item alone, holding it", len(small), slices.Collect(maps.Keys(got)))
	}

	big := []byte(`"` + strings.Repeat("x", 100_000) + `"`)
	tk := newTask(t, l, "big", big, now)
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	other := newTask(t, l, "big", []byte(`"`+strings.Repeat("y", 100_000)+`"`), now)
	if err := s.Create(ctx, other); !errors.Is(err, task.ErrExists) {
		t.Fatalf("Create of a taken id: got %v, want ErrExists", err)
	}
	got := items("big")
	if len(got) != 2 || got["task"]["payload"] != nil || got["payload"] == nil {
		t.Fatalf("a %d-byte payload: items %v, want the task item and one payload item", len(big), slices.Collect(maps.Keys(got)))
	}
	if p := got["payload"]["payload"].(*types.AttributeValueMemberB).Value; string(p) != string(big) {
		t.Errorf("the payload item holds %d bytes, want the first Create's %d", len(p), len(big))
	}
	if got["payload"]["expires"] != nil {
		t.Error("the payload item of a live task has a TTL")
	}

	cancelled, err := task.Cancel(tk, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, cancelled, tk.Version); err != nil {
		t.Fatal(err)
	}
	got = items("big")
	want, ok := got["task"]["expires"].(*types.AttributeValueMemberN)
	if e, _ := got["payload"]["expires"].(*types.AttributeValueMemberN); !ok || e == nil || e.Value != want.Value {
		t.Errorf("finished task: payload item expires %v, want the task item's %v", got["payload"]["expires"], got["task"]["expires"])
	}
}

// TestLongErrorEndsTask: a fatal failure whose error is 1 MB long, over DynamoDB's 400 KB item,
// still ends the task as fatal_failure, keeping the head of the error within
// task.MaxErrorBytes, instead of leaving it processing until it times out and runs again.
func TestLongErrorEndsTask(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "long"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	enq, err := task.Enqueue(newTask(t, l, "e1", []byte(`{}`), now), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, enq); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(s, status.Config{Task: cfg})
	claimed, err := hsc.Claim(ctx, l.Name, "e1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := hsc.Heartbeat(ctx, l.Name, "e1", claimed.Lease); err != nil {
		t.Fatal(err)
	}
	long := "boom: " + strings.Repeat("x", 1<<20)
	if _, err := hsc.SetResult(ctx, l.Name, "e1", claimed.Lease, status.Result{Outcome: status.Fatal, Error: long}); err != nil {
		t.Errorf("SetResult with a 1 MB error: %v", err)
	}
	got := mustGet(t, s, l.Name, "e1")
	if got.Status != task.StatusFatalFailure || len(got.Error) > task.MaxErrorBytes || !strings.HasPrefix(got.Error, "boom: xxx") || !strings.Contains(got.Error, "truncated") {
		t.Errorf("stored: %s with a %d-byte error; want fatal_failure with the error's head, at most %d bytes, marked truncated", got.Status, len(got.Error), task.MaxErrorBytes)
	}
}
