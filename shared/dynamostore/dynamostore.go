// Package dynamostore is the task.Store on Amazon DynamoDB: one table holds tasks and gates, with
// two sharded global secondary indexes, "due" for the consumer's sweeps and "list" for lists and
// counts. docs/data-model.md describes the keys and items; docs/capacity.md how the shard count
// follows from the load.
//
// The design follows from DynamoDB's limits:
//   - A partition takes at most 1,000 write units a second, and a global index whose writes are
//     throttled throttles the table. Both indexes therefore spread each lambda over Shards
//     partitions by a hash of the task id, and the store queries the shards in parallel.
//   - Index reads are eventually consistent, so an index hit is only a hint: the store reads the
//     task itself with a strongly consistent read and checks it again, and every transition is a
//     write conditional on the task's version.
//   - The due index is sparse: a terminal task has no next trigger and leaves it, so a sweep reads
//     only live tasks. Terminal tasks expire through TTL after Retention.
//   - An item is at most 400 KB: a write over it fails with task.ErrTooLarge.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/openatf/atf/shared/task"
)

// Defaults of Config.
const (
	// DefaultShards is how many partitions of each index a lambda's tasks are spread over. One
	// partition of an index takes about 1,000 index writes a second; docs/capacity.md derives the
	// count for a given load. Each shard costs one query per sweep, so idle lambdas want few.
	DefaultShards = 4
	// DefaultRetention is how long a finished task stays readable before TTL removes it.
	DefaultRetention = 30 * 24 * time.Hour
	// MaxShards bounds Shards: a sweep queries every shard of a lambda.
	MaxShards = 256
	// MaxAttempts is how many times the SDK tries a call that DynamoDB throttles, backing off
	// between tries, before the store gives up with task.ErrThrottled.
	MaxAttempts = 8
	// MaxBackoff caps the wait between two tries: a caller is waiting.
	MaxBackoff = time.Second
)

// Config configures a Store.
type Config struct {
	// Table is the table name, such as atf-dev. Required.
	Table string
	// Shards is the number of index partitions per lambda; DefaultShards if zero. It may grow
	// later (entries in lower shards are still read) but never shrink.
	Shards int
	// LambdaShards overrides Shards for busy lambdas, by lambda name.
	LambdaShards map[string]int
	// Retention is how long finished tasks are kept; DefaultRetention if zero.
	Retention time.Duration
	// Now is the clock for TTL of tasks that carry no update time; time.Now if nil.
	Now func() time.Time
	// Logger reports what the store cannot return, such as a counter write that failed after
	// its task write; slog.Default() if nil.
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	if c.Table == "" {
		return errors.New("dynamostore: Table is required")
	}
	if !tableName.MatchString(c.Table) {
		return fmt.Errorf("dynamostore: Table %q: use 3 to 255 of a-z, A-Z, 0-9, '_', '-' and '.'", c.Table)
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		return fmt.Errorf("dynamostore: Shards must be in 1..%d, got %d", MaxShards, c.Shards)
	}
	for l, n := range c.LambdaShards {
		if n < 1 || n > MaxShards {
			return fmt.Errorf("dynamostore: LambdaShards[%s] must be in 1..%d, got %d", l, MaxShards, n)
		}
	}
	if c.Retention < 0 {
		return fmt.Errorf("dynamostore: Retention must not be negative, got %s", c.Retention)
	}
	return nil
}

var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Store is a task.Store on one DynamoDB table.
type Store struct {
	db  *dynamodb.Client
	cfg Config
}

var _ task.Store = (*Store)(nil)

// NewClient returns a DynamoDB client that retries throttled calls with backoff, up to
// MaxAttempts, and never gives up early on a client-side retry budget: under a burst, waiting is
// better than failing a schedule request.
func NewClient(cfg aws.Config, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = MaxAttempts
			so.MaxBackoff = MaxBackoff
			so.RateLimiter = ratelimit.None
		})
	}}, opts...)...)
}

// New returns a store on an existing table; CreateTable makes one.
func New(db *dynamodb.Client, c Config) (*Store, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: c}, nil
}

// Close is a no-op: the client holds no resources of its own.
func (st *Store) Close() error { return nil }

func (st *Store) shards(lambda string) int {
	if n, ok := st.cfg.LambdaShards[lambda]; ok {
		return n
	}
	return st.cfg.Shards
}

func (st *Store) now() time.Time { return st.cfg.Now() }

func taskKey(lambda, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(taskPK(lambda, id)), attrSK: s(taskSK)}
}

// validKey checks the names that go into keys, so no input can forge another key.
func validKey(lambda, id string) error {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		return err
	}
	return task.ValidateID("task id", id)
}

// Create stores a new task, or returns task.ErrExists.
func (st *Store) Create(ctx context.Context, t task.Task) error {
	if err := validKey(t.Lambda, t.ID); err != nil {
		return err
	}
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.cfg.Table, Item: st.marshal(t),
		ConditionExpression:    aws.String("attribute_not_exists(pk)"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrExists, "task %q of lambda %s already exists", t.ID, t.Lambda)
	}
	if err != nil {
		return st.translate(err, "create %s/%s", t.Lambda, t.ID)
	}
	st.countMove(ctx, t, "")
	return nil
}

// CreateBatch stores all the tasks in one transaction, or none of them. It returns task.ErrExists
// naming a task whose id is taken.
func (st *Store) CreateBatch(ctx context.Context, tasks []task.Task) error {
	if err := task.CheckBatch(tasks); err != nil || len(tasks) == 0 {
		return err
	}
	items := make([]types.TransactWriteItem, len(tasks))
	for i, t := range tasks {
		if err := validKey(t.Lambda, t.ID); err != nil {
			return err
		}
		items[i] = types.TransactWriteItem{Put: &types.Put{
			TableName: &st.cfg.Table, Item: st.marshal(t),
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	}
	// The SDK fills in ClientRequestToken once per call, so its own retries cannot apply the
	// transaction twice (and then fail on the first attempt's items).
	_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) {
		for i, r := range cancelled.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" && i < len(tasks) {
				return task.Errorf(task.ErrExists, "task %q of lambda %s already exists; no task of the batch was created", tasks[i].ID, tasks[i].Lambda)
			}
		}
	}
	if err != nil {
		return st.translate(err, "create a batch of %d tasks", len(tasks))
	}
	st.countNew(ctx, tasks)
	return nil
}

// Get reads one task, strongly consistent.
func (st *Store) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	if validKey(lambda, id) != nil {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.cfg.Table, Key: taskKey(lambda, id), ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return task.Task{}, st.translate(err, "get %s/%s", lambda, id)
	}
	if out.Item == nil {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	}
	t, err := unmarshal(out.Item)
	if err != nil {
		return task.Task{}, fmt.Errorf("dynamostore: get %s/%s: %w", lambda, id, err)
	}
	return t, nil
}

// Update replaces the task if its stored version is still prev. DynamoDB evaluates the condition
// and writes atomically, so of racing updates from one version exactly one succeeds.
func (st *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	if validKey(t.Lambda, t.ID) != nil {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	}
	// The old item tells the status the task leaves, for its counter; returning it costs no
	// capacity.
	out, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.cfg.Table, Item: st.marshal(t),
		ConditionExpression:       aws.String("version = :prev"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":prev": n(prev)},
		ReturnValues:              types.ReturnValueAllOld,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	}
	if err != nil {
		return st.translate(err, "update %s/%s", t.Lambda, t.ID)
	}
	st.countMove(ctx, t, task.Status(str(out.Attributes, attrStatus)))
	return nil
}

// SetGate sets a gate; open deletes it. Gates share one partition: there are few, and the
// consumer reads them all at every sweep.
func (st *Store) SetGate(ctx context.Context, g task.Gate) error {
	if err := task.ValidateName("lambda name", g.Lambda); err != nil {
		return err
	}
	if g.Collection != "" {
		if err := task.ValidateID("collection", g.Collection); err != nil {
			return err
		}
	}
	key := map[string]types.AttributeValue{attrPK: s(gatePK), attrSK: s(g.Lambda + "#" + g.Collection)}
	var err error
	if g.Mode == task.GateOpen {
		_, err = st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &st.cfg.Table, Key: key, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	} else {
		item := map[string]types.AttributeValue{
			attrPK: key[attrPK], attrSK: key[attrSK],
			attrLambda: s(g.Lambda), attrMode: s(g.Mode), attrUpdatedAt: n(g.UpdatedAt.UnixNano()),
		}
		if g.Collection != "" {
			item[attrCollection] = s(g.Collection)
		}
		_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.cfg.Table, Item: item, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	}
	return st.translate(err, "set gate %s/%s", g.Lambda, g.Collection)
}

// Gates returns every gate that is not open.
func (st *Store) Gates(ctx context.Context) ([]task.Gate, error) {
	var gates []task.Gate
	p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
		TableName: &st.cfg.Table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(gatePK)},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, st.translate(err, "gates")
		}
		for _, item := range out.Items {
			g := task.Gate{Mode: str(item, attrMode), Lambda: str(item, attrLambda), Collection: str(item, attrCollection)}
			if v, ok := item[attrUpdatedAt].(*types.AttributeValueMemberN); ok {
				var nanos int64
				fmt.Sscan(v.Value, &nanos)
				g.UpdatedAt = time.Unix(0, nanos).UTC()
			}
			gates = append(gates, g)
		}
	}
	return gates, nil
}

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// getMany reads tasks by key with strongly consistent reads, 100 keys per call, and returns the
// ones that exist by id.
func (st *Store) getMany(ctx context.Context, lambda string, ids []string) (map[string]task.Task, error) {
	found := make(map[string]task.Task, len(ids))
	for chunk := range slices.Chunk(ids, 100) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, id := range chunk {
			keys[i] = taskKey(lambda, id)
		}
		req := map[string]types.KeysAndAttributes{st.cfg.Table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				// DynamoDB returns what it could not read under load: back off and ask again.
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return nil, err
				}
				if attempt >= MaxAttempts {
					return nil, task.Errorf(task.ErrThrottled, "DynamoDB is throttling reads of lambda %s; retry later", lambda)
				}
			}
			out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			if err != nil {
				return nil, st.translate(err, "read tasks of %s", lambda)
			}
			for _, item := range out.Responses[st.cfg.Table] {
				t, err := unmarshal(item)
				if err != nil {
					return nil, fmt.Errorf("dynamostore: read tasks of %s: %w", lambda, err)
				}
				found[t.ID] = t
			}
			req = out.UnprocessedKeys
		}
	}
	return found, nil
}

func backoff(attempt int) time.Duration {
	return min(20*time.Millisecond<<attempt, 2*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// parallel runs fn for every shard at once and returns the first error.
func parallel(n int, fn func(shard int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// translate turns DynamoDB's errors into the domain's: throttling that outlasted the retries
// becomes task.ErrThrottled and an item over the size limit task.ErrTooLarge. Anything else is
// wrapped with what the store was doing.
func (st *Store) translate(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			return task.Errorf(task.ErrThrottled, "%s: the task store is busy; retry later", what)
		case "ValidationException":
			// "Item size has exceeded the maximum allowed size", "Transaction request cannot be
			// larger than 4 MB", "Transaction payload size cannot exceed 4MB".
			if msg := api.ErrorMessage(); (strings.Contains(msg, "size") && strings.Contains(msg, "exceed")) || strings.Contains(msg, "larger than") {
				return task.Errorf(task.ErrTooLarge, "%s: the task is over DynamoDB's 400 KB item limit", what)
			}
		}
	}
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) {
		for _, r := range cancelled.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ThrottlingError", "ProvisionedThroughputExceeded":
				return task.Errorf(task.ErrThrottled, "%s: the task store is busy; retry later", what)
			case "TransactionConflict":
				return task.Errorf(task.ErrConflict, "%s: another write touched the same tasks; retry", what)
			case "ValidationError":
				if strings.Contains(aws.ToString(r.Message), "size") {
					return task.Errorf(task.ErrTooLarge, "%s: a task is over DynamoDB's 400 KB item limit", what)
				}
			}
		}
	}
	return fmt.Errorf("dynamostore: %s: %w", what, err)
}
