// Package dynamostore is the task.Store on Amazon DynamoDB: one table holds tasks and gates, with
// two sharded global secondary indexes, "due" for the consumer's sweeps and "list2" for lists.
// docs/data-model.md describes the keys and items; docs/capacity.md how the shard count
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
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

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
var _ task.CountGatherer = (*Store)(nil)

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

// Create stores a new task, or returns task.ErrExists. A payload over InlinePayload is written
// first, in an item of its own, and so are the chunks of its After (flow.go); the task item,
// written last and only if the id is free, makes the task exist. A task is therefore never seen
// without its payload or its upstreams.
func (st *Store) Create(ctx context.Context, t task.Task) error {
	if err := validKey(t.Lambda, t.ID); err != nil {
		return err
	}
	item, payload, chunks := st.marshal(t, rand.Text())
	var payloads []map[string]types.AttributeValue
	if payload != nil {
		payloads = append(payloads, payload)
	}
	if err := st.putPayloads(ctx, payloads...); err != nil {
		return st.translate(err, "create %s/%s", t.Lambda, t.ID)
	}
	if err := st.putItems(ctx, chunks); err != nil {
		st.deletePayloads(ctx, payloads...)
		return st.translate(err, "create %s/%s: write its upstreams", t.Lambda, t.ID)
	}
	cond, names, values := createCondition(t.Nonce)
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.cfg.Table, Item: item,
		ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
	})
	if rejected(err) {
		st.deletePayloads(ctx, payloads...)
		st.deleteItems(ctx, chunks)
	}
	if isConditionFailed(err) {
		var failed *types.ConditionalCheckFailedException
		errors.As(err, &failed)
		return createRefused(t, failed.Item)
	}
	if err != nil {
		return st.translate(err, "create %s/%s", t.Lambda, t.ID)
	}
	st.countMove(ctx, t, "")
	return nil
}

// CreateBatch stores all the tasks in one transaction, or none of them. It returns task.ErrExists
// naming a task whose id is taken. Payload items and after-list chunks are written before the
// transaction, as in Create: the transaction holds only task items, one per task.
func (st *Store) CreateBatch(ctx context.Context, tasks []task.Task) error {
	if err := task.CheckBatch(tasks); err != nil || len(tasks) == 0 {
		return err
	}
	items := make([]types.TransactWriteItem, len(tasks))
	var payloads, chunks []map[string]types.AttributeValue
	for i, t := range tasks {
		if err := validKey(t.Lambda, t.ID); err != nil {
			return err
		}
		item, payload, after := st.marshal(t, rand.Text())
		if payload != nil {
			payloads = append(payloads, payload)
		}
		chunks = append(chunks, after...)
		cond, names, values := createCondition(t.Nonce)
		items[i] = types.TransactWriteItem{Put: &types.Put{
			TableName: &st.cfg.Table, Item: item,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}
	}
	if err := st.putPayloads(ctx, payloads...); err != nil {
		return st.translate(err, "create a batch of %d tasks", len(tasks))
	}
	if err := st.putItems(ctx, chunks); err != nil {
		st.deletePayloads(ctx, payloads...)
		return st.translate(err, "create a batch of %d tasks: write their upstreams", len(tasks))
	}
	// The SDK fills in ClientRequestToken once per call, so its own retries cannot apply the
	// transaction twice (and then fail on the first attempt's items).
	_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if rejected(err) {
		st.deletePayloads(ctx, payloads...)
		st.deleteItems(ctx, chunks)
	}
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) {
		for i, r := range cancelled.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" && i < len(tasks) {
				return fmt.Errorf("%w; no task of the batch was created", createRefused(tasks[i], r.Item))
			}
		}
	}
	if err != nil {
		return st.translate(err, "create a batch of %d tasks", len(tasks))
	}
	st.countNew(ctx, tasks)
	return nil
}

// putPayloads writes payload items, a few at a time. Their keys are fresh, so no condition is
// needed: nothing else can be at them.
func (st *Store) putPayloads(ctx context.Context, items ...map[string]types.AttributeValue) error {
	written := 0
	for chunk := range slices.Chunk(items, payloadWriters) {
		err := parallel(len(chunk), func(i int) error {
			_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: &st.cfg.Table, Item: chunk[i], ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
			})
			return err
		})
		if err != nil {
			// Those of this chunk that were written are deleted too: a delete of a missing item
			// is a no-op.
			st.deletePayloads(ctx, items[:written+len(chunk)]...)
			return err
		}
		written += len(chunk)
	}
	return nil
}

// payloadWriters bounds the payload items a batch writes at once.
const payloadWriters = 8

// deletePayloads deletes payload items whose task item was certainly not written (the write was
// rejected), so nothing refers to them. It is best effort, on a deadline of its own even if the
// caller's context has ended: an item it misses stays behind unread, costing only storage.
func (st *Store) deletePayloads(ctx context.Context, items ...map[string]types.AttributeValue) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for chunk := range slices.Chunk(items, payloadWriters) {
		_ = parallel(len(chunk), func(i int) error {
			_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: &st.cfg.Table, Key: map[string]types.AttributeValue{attrPK: chunk[i][attrPK], attrSK: chunk[i][attrSK]},
				ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
			})
			return err
		})
	}
}

// cleanupTimeout bounds the writes that tidy up after a write: deleting the payload items of a
// rejected Create, setting the TTL of a finished task's payload item.
const cleanupTimeout = 5 * time.Second

// rejected reports whether DynamoDB certainly did not apply a write: it refused the request (a
// failed condition, a cancelled transaction, an item too large, throttling). A timeout or a
// server error may hide a write that was applied.
func rejected(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorFault() == smithy.FaultClient
}

// Get reads one task, strongly consistent: its item, then its payload item if it has one.
func (st *Store) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	return st.get(ctx, lambda, id, true)
}

// GetState reads one task without a payload kept in an item of its own (task.StateReader): one
// read unit for a heartbeat or a result, whatever the payload's size.
func (st *Store) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	return st.get(ctx, lambda, id, false)
}

func (st *Store) get(ctx context.Context, lambda, id string, full bool) (task.Task, error) {
	if validKey(lambda, id) != nil {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	}
	for range afterRereads {
		t, err := st.getOnce(ctx, lambda, id, full)
		if !errors.Is(err, errAfterMoved) {
			return t, err
		}
	}
	return task.Task{}, task.Errorf(task.ErrConflict, "task %s/%s: its upstreams keep changing; try again", lambda, id)
}

// getOnce reads a task: its item, then, for a full read, its payload item and its After.
func (st *Store) getOnce(ctx context.Context, lambda, id string, full bool) (task.Task, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.cfg.Table, Key: taskKey(lambda, id), ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return task.Task{}, st.translate(err, "get %s/%s", lambda, id)
	}
	if out.Item == nil || isTombstone(out.Item) {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	}
	t, ref, err := unmarshal(out.Item)
	if err != nil {
		return task.Task{}, fmt.Errorf("dynamostore: get %s/%s: %w", lambda, id, err)
	}
	if !full {
		return t, nil
	}
	if t.AfterCount > 0 {
		t.After, err = st.readAfter(ctx, lambda, id, str(out.Item, attrAfterRef), 0, t.AfterCount)
		switch {
		case errors.Is(err, errAfterMoved) && t.Status.Terminal():
			// Only TTL removes the list of an ended task (AddUpstreams needs one that has not
			// started), and it may do so a little before the task item (see expireAfter).
			t.After = nil
		case err != nil:
			return task.Task{}, err
		}
	}
	if ref == "" {
		return t, nil
	}
	// The payload item never changes after Create: reading it after the task item is consistent.
	pl, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.cfg.Table, Key: payloadKey(lambda, id, ref), ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return task.Task{}, st.translate(err, "get the payload of %s/%s", lambda, id)
	}
	return withPayload(t, pl.Item)
}

// withPayload sets the task's payload from its payload item. TTL may delete the payload item of a
// finished task before its task item; a running task without one is an error.
func withPayload(t task.Task, item map[string]types.AttributeValue) (task.Task, error) {
	if v, ok := item[attrPayload].(*types.AttributeValueMemberB); ok {
		t.Payload = v.Value
		return t, nil
	}
	if t.Status.Terminal() {
		return t, nil
	}
	return task.Task{}, fmt.Errorf("dynamostore: task %s/%s: its payload item is missing", t.Lambda, t.ID)
}

func payloadKey(lambda, id, ref string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(taskPK(lambda, id)), attrSK: s(payloadSK + ref)}
}

// Update writes the task's state if its stored version is still prev. DynamoDB evaluates the
// condition and writes atomically, so of racing updates from one version exactly one succeeds.
//
// It is an UpdateItem of the task item's state attributes: the payload, set once by Create, is
// neither written nor read, and DynamoDB charges the write by the task item alone. When the task
// ends, its payload item, if any, gets the task item's TTL. An attempt the transition ended is
// recorded after it (recordAttempt), unless it succeeded: the task item keeps that one. A claim's
// start under limits (t.Limits) is a transaction with the limits' records instead (start).
func (st *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	if len(t.Limits.Of(t)) > 0 {
		if err := st.start(ctx, t, prev); err != nil { // limits.go
			return err
		}
	} else if _, err := st.update(ctx, t, prev, nil); err != nil {
		return err
	}
	st.recordAttempt(ctx, t)
	return nil
}

// update is Update, setting extra attributes besides the state. It returns the task item as it
// was before.
func (st *Store) update(ctx context.Context, t task.Task, prev int64, extra map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	return st.updateItem(ctx, t, prev, extra, nil, "")
}

// updateItem is update, removing the attributes in remove too, and on the further condition
// cond if it is not empty. A failed condition is task.ErrConflict, returned with the item as it
// was.
func (st *Store) updateItem(ctx context.Context, t task.Task, prev int64, extra map[string]types.AttributeValue, remove []string, cond string) (map[string]types.AttributeValue, error) {
	if validKey(t.Lambda, t.ID) != nil {
		return nil, task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	}
	u := st.updateOf(t, prev, extra, remove, cond)
	in := &dynamodb.UpdateItemInput{
		TableName: &st.cfg.Table, Key: u.Key,
		UpdateExpression:          u.UpdateExpression,
		ConditionExpression:       u.ConditionExpression,
		ExpressionAttributeNames:  u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		// The old item tells the status the task leaves, for its counter, and whether a payload
		// item needs a TTL; on a failed condition, the task as it is now, so that a transition
		// tries again without reading it (task.Changed). Returning them costs no capacity.
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	out, err := st.db.UpdateItem(ctx, in)
	if isConditionFailed(err) {
		var failed *types.ConditionalCheckFailedException
		errors.As(err, &failed)
		var old map[string]types.AttributeValue
		if failed != nil {
			old = failed.Item
		}
		return old, st.changed(t, prev, old)
	}
	if err != nil {
		return nil, st.translate(err, "update %s/%s", t.Lambda, t.ID)
	}
	from := task.Status(str(out.Attributes, attrStatus))
	st.countMove(ctx, t, from)
	// Once per task: an ended task that tells its downstreams moves on, ended to ended.
	if t.Status.Terminal() && !from.Terminal() {
		if ref := str(out.Attributes, attrPayloadRef); ref != "" {
			st.expirePayload(ctx, t, ref)
		}
		if aref, count := str(out.Attributes, attrAfterRef), attrInt(out.Attributes, attrAfterCount); aref != "" && count > 0 {
			st.expireAfter(ctx, t, aref, count)
		}
	}
	return out.Attributes, nil
}

// updateOf is the write of t over version prev that updateItem makes: its state attributes set,
// those it lacks and remove removed, and extra set, on the condition of the version and cond.
func (st *Store) updateOf(t task.Task, prev int64, extra map[string]types.AttributeValue, remove []string, cond string) *types.Update {
	state := st.marshalState(t)
	names := make(map[string]string, len(stateAttrs))
	values := map[string]types.AttributeValue{":prev": n(prev)}
	var set []string
	for i, name := range remove {
		ph := "#r" + strconv.Itoa(i)
		names[ph] = name
		remove[i] = ph
	}
	for i, name := range stateAttrs {
		ph := "#a" + strconv.Itoa(i)
		names[ph] = name
		if v, ok := state[name]; ok {
			set = append(set, ph+" = :a"+strconv.Itoa(i))
			values[":a"+strconv.Itoa(i)] = v
		} else {
			remove = append(remove, ph)
		}
	}
	for name, v := range extra {
		i := strconv.Itoa(len(names))
		names["#x"+i], values[":x"+i] = name, v
		set = append(set, "#x"+i+" = :x"+i)
	}
	expr := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	condition := "#a" + strconv.Itoa(slices.Index(stateAttrs, attrVersion)) + " = :prev"
	if cond != "" {
		condition += " AND " + cond
	}
	return &types.Update{
		TableName: &st.cfg.Table, Key: taskKey(t.Lambda, t.ID),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(condition),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}
}

// changed is the conflict of an update of t from version prev whose condition failed on old, the
// item as it was then (nil if there was none): a task.Changed with the task as it is, when it
// moved to another version.
func (st *Store) changed(t task.Task, prev int64, old map[string]types.AttributeValue) error {
	msg := fmt.Sprintf("task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	if old == nil || attrInt(old, attrVersion) == int(prev) {
		return task.Errorf(task.ErrConflict, "%s", msg) // gone, or refused by a further condition
	}
	cur, ref, err := unmarshal(old)
	if err != nil {
		return task.Errorf(task.ErrConflict, "%s", msg)
	}
	return &task.Changed{Current: cur, Whole: ref == "" && cur.AfterCount == 0, Msg: msg}
}

// expirePayload gives a finished task's payload item the TTL of its task item. This write costs
// a unit per KB of payload, once per task. It comes after the transition, so a task that lives
// on never loses its payload; if it fails, the payload item outlives the task, costing storage
// only: nothing reads it once the task item is gone.
func (st *Store) expirePayload(ctx context.Context, t task.Task, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, _ = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.cfg.Table, Key: payloadKey(t.Lambda, t.ID, ref),
		UpdateExpression:          aws.String("SET #e = :e"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  map[string]string{"#e": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": n(st.expires(t))},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
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
				nanos, _ := strconv.ParseInt(v.Value, 10, 64) // written by this store: a number
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

// getStates reads task items by key with strongly consistent reads, 100 keys per call, and
// returns the tasks that exist by id, without the payloads kept in items of their own: refs names
// those payload items, by task id, for fillPayloads. A sweep needs no payload, and a filtered
// list only those of its page.
func (st *Store) getStates(ctx context.Context, lambda string, ids []string) (found map[string]task.Task, refs map[string]string, err error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = taskKey(lambda, id)
	}
	found, refs = make(map[string]task.Task, len(ids)), map[string]string{}
	err = st.batchGet(ctx, lambda, keys, func(item map[string]types.AttributeValue) error {
		if isTombstone(item) {
			return nil
		}
		t, ref, err := unmarshal(item)
		if err != nil {
			return err
		}
		found[t.ID] = t
		if ref != "" {
			refs[t.ID] = ref
		}
		return nil
	})
	return found, refs, err
}

// fillPayloads reads the payload items of those tasks that refs names (see getStates), strongly
// consistent, 100 keys per call, and sets the tasks' payloads.
func (st *Store) fillPayloads(ctx context.Context, lambda string, tasks []task.Task, refs map[string]string) error {
	var keys []map[string]types.AttributeValue
	for _, t := range tasks {
		if ref := refs[t.ID]; ref != "" {
			keys = append(keys, payloadKey(lambda, t.ID, ref))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	payloads := make(map[string]map[string]types.AttributeValue, len(keys)) // by pk
	err := st.batchGet(ctx, lambda, keys, func(item map[string]types.AttributeValue) error {
		payloads[str(item, attrPK)] = item
		return nil
	})
	if err != nil {
		return err
	}
	for i, t := range tasks {
		if refs[t.ID] == "" {
			continue
		}
		if tasks[i], err = withPayload(t, payloads[taskPK(lambda, t.ID)]); err != nil {
			return err
		}
	}
	return nil
}

// batchGet reads items by key, strongly consistent, 100 keys per call, and hands each to fn.
func (st *Store) batchGet(ctx context.Context, lambda string, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	for chunk := range slices.Chunk(keys, 100) {
		if err := st.batchGetOne(ctx, "tasks of "+lambda, chunk, fn); err != nil {
			return err
		}
	}
	return nil
}

// batchGetOne reads up to 100 distinct keys with one BatchGetItem, strongly consistent, asking
// again for what DynamoDB left unprocessed, and hands each item to fn. what names the items for
// errors.
func (st *Store) batchGetOne(ctx context.Context, what string, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	return st.batchGetProjected(ctx, what, types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(true)}, fn)
}

// batchGetProjected is batchGetOne for the keys and projection of ka.
func (st *Store) batchGetProjected(ctx context.Context, what string, ka types.KeysAndAttributes, fn func(map[string]types.AttributeValue) error) error {
	req := map[string]types.KeysAndAttributes{st.cfg.Table: ka}
	for attempt := 0; len(req) > 0; attempt++ {
		if attempt > 0 {
			// DynamoDB returns what it could not read under load: back off and ask again.
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			if attempt >= MaxAttempts {
				return task.Errorf(task.ErrThrottled, "DynamoDB is throttling reads of %s; retry later", what)
			}
		}
		out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
		if err != nil {
			return st.translate(err, "read %s", what)
		}
		for _, item := range out.Responses[st.cfg.Table] {
			if err := fn(item); err != nil {
				return fmt.Errorf("dynamostore: read %s: %w", what, err)
			}
		}
		req = out.UnprocessedKeys
	}
	return nil
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
// becomes task.ErrThrottled, an item over the size limit task.ErrTooLarge, and a DynamoDB that
// could not be reached or did not answer in time task.ErrUnavailable. Anything else is wrapped
// with what the store was doing.
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
		case "TransactionConflictException":
			// A plain write of an item a transaction was writing or checking (a limited start's
			// task, or a holder it checks): as a version conflict, read again and retry.
			return task.Errorf(task.ErrConflict, "%s: a transaction was writing the same task; retry", what)
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
	if unavailable(err) {
		// The cause stays in the chain: a timeout is still context.DeadlineExceeded to metrics.
		return fmt.Errorf("dynamostore: %s: %w: %w", what, task.ErrUnavailable, err)
	}
	return fmt.Errorf("dynamostore: %s: %w", what, err)
}

// unavailable reports an error that says nothing of the call, only that DynamoDB was out of
// reach: the request could not be sent or its answer not read (refused, reset, a timeout), the
// service failed with a fault of its own (5xx), or the caller's deadline passed meanwhile. The
// SDK has retried all but the deadline already. A client that went away (context.Canceled) is
// not the store's fault, and stays as it is.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var send *smithyhttp.RequestSendError
	var netErr net.Error
	var resp *smithyhttp.ResponseError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &send) || errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &resp) && resp.HTTPStatusCode() >= 500)
}
