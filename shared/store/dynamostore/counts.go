package dynamostore

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Counts are kept in one small counter item per (lambda, shard): pk count#<lambda>#<shard>, sk
// count, a number per status. A lambda's counts are the sum of its shards' items, so a move may
// be added to any of them: a task written alone adds to its own shard's item (UpdateItem ADD,
// 1 WRU), and writes made together (a batch created, GatherCounts) add their moves up per lambda
// first and write them to one item, a shard of the batch's, so that a batch costs one counter
// write per lambda it touches and its writes spread over the shards as its tasks do. Reading
// the counts costs one item per shard, whatever the backlog. The counter write follows the task
// write: a crash between the two, or a counter write that fails, leaves the counts off by the
// moves it carried until Recount. docs/capacity.md has the costs.

const countSK = "count"

// countTimeout bounds a counter write. It runs even when the caller's context has ended: the task
// write it follows has already happened.
const countTimeout = 5 * time.Second

func countPK(lambda string, shard int) string { return "count#" + lambda + "#" + strconv.Itoa(shard) }

// count adds deltas to the counter of a lambda's shard, or to the gathered moves of ctx (see
// GatherCounts) until they are flushed, to the counter of the shard of the first move gathered.
func (st *Store) count(ctx context.Context, lambda string, shard int, deltas map[task.Status]int) {
	if g, ok := ctx.Value(gatherKey{st}).(*gathered); ok && g.add(counter{lambda, shard}, deltas) {
		return
	}
	st.writeCount(ctx, lambda, shard, deltas)
}

// writeCount writes deltas to the counter of a lambda's shard. A failure is logged, not returned:
// the task writes succeeded, and the counts drift by these moves until Recount.
func (st *Store) writeCount(ctx context.Context, lambda string, shard int, deltas map[task.Status]int) {
	expr, names, values := "ADD", map[string]string{}, map[string]types.AttributeValue{}
	for status, d := range deltas {
		if d == 0 {
			continue
		}
		i := strconv.Itoa(len(names))
		if len(names) > 0 {
			expr += ","
		}
		expr += " #s" + i + " :d" + i
		names["#s"+i], values[":d"+i] = string(status), n(int64(d))
	}
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
	defer cancel()
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &st.cfg.Table,
		Key:              map[string]types.AttributeValue{attrPK: s(countPK(lambda, shard)), attrSK: s(countSK)},
		UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		st.cfg.Logger.Warn("task counts drifted: a counter write failed; dynamostore.Recount repairs them",
			"lambda", lambda, "shard", shard, "deltas", deltas, "err", err)
	}
}

// countMove counts a task's move from one status to another; from is empty for a new task.
func (st *Store) countMove(ctx context.Context, t task.Task, from task.Status) {
	if from == t.Status {
		return
	}
	deltas := map[task.Status]int{t.Status: 1}
	if from != "" {
		deltas[from] = -1
	}
	st.count(ctx, t.Lambda, shardOf(t.ID, st.shards(t.Lambda)), deltas)
}

// countNew counts new tasks with one counter write per lambda, to the shard of its first task.
func (st *Store) countNew(ctx context.Context, tasks []task.Task) {
	var order []counter
	deltas := map[string]map[task.Status]int{}
	for _, t := range tasks {
		if deltas[t.Lambda] == nil {
			deltas[t.Lambda] = map[task.Status]int{}
			order = append(order, counter{t.Lambda, shardOf(t.ID, st.shards(t.Lambda))})
		}
		deltas[t.Lambda][t.Status]++
	}
	for _, k := range order {
		st.count(ctx, k.lambda, k.shard, deltas[k.lambda])
	}
}

// counter names a counter item: a lambda's shard.
type counter struct {
	lambda string
	shard  int
}

// gatherKey is the context key of the moves gathered for one store.
type gatherKey struct{ st *Store }

// gathered is the count moves of the writes made under one GatherCounts, by lambda, each to be
// written to the counter item of the first move's shard.
type gathered struct {
	mu      sync.Mutex
	moves   map[counter]map[task.Status]int // keyed by the lambda's first counter
	first   map[string]counter
	flushed bool // later moves are written at once
}

// add adds deltas to the moves of k's lambda, and reports false if the moves were flushed already.
func (g *gathered) add(k counter, deltas map[task.Status]int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flushed {
		return false
	}
	if first, ok := g.first[k.lambda]; ok {
		k = first
	} else {
		g.first[k.lambda] = k
		g.moves[k] = map[task.Status]int{}
	}
	for status, d := range deltas {
		g.moves[k][status] += d
	}
	return true
}

// take returns the moves gathered and marks them flushed.
func (g *gathered) take() map[counter]map[task.Status]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	moves := g.moves
	g.moves, g.first, g.flushed = nil, nil, true
	return moves
}

// countWriters bounds the counter writes a flush has in flight at once.
const countWriters = 8

// GatherCounts adds up the count moves of the writes made under the context it returns, per
// lambda, until flush writes each lambda's sum with one UpdateItem ADD (task.CountGatherer) to
// the counter item of the shard of its first move: a status batch of 10 claims makes one counter
// write instead of 10. The counts sum the lambda's items, and ADD is commutative, so they come
// out as they would have; they only lag their task writes until the flush, as they lagged by one
// round trip before. flush writes on deadlines of its own, since the task writes it counts are
// made whatever the caller does next; a write under the context after flush counts at once.
func (st *Store) GatherCounts(ctx context.Context) (context.Context, func()) {
	g := &gathered{moves: map[counter]map[task.Status]int{}, first: map[string]counter{}}
	return context.WithValue(ctx, gatherKey{st}, g), func() {
		moves := g.take()
		keys := slices.Collect(maps.Keys(moves))
		_ = parallelN(len(keys), countWriters, func(i int) error {
			st.writeCount(ctx, keys[i].lambda, keys[i].shard, moves[keys[i]])
			return nil
		})
	}
}

// Counts returns how many tasks of the lambda are in each status, from its counter items: one
// eventually consistent read per shard. Finished tasks count until the counters are rebuilt,
// also after TTL has removed them.
func (st *Store) Counts(ctx context.Context, lambda string) (map[task.Status]int, error) {
	counts := map[task.Status]int{}
	if task.ValidateName("lambda name", lambda) != nil {
		return counts, nil
	}
	var keys []map[string]types.AttributeValue
	for shard := range st.shards(lambda) {
		keys = append(keys, map[string]types.AttributeValue{attrPK: s(countPK(lambda, shard)), attrSK: s(countSK)})
	}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 100)]
		keys = keys[len(chunk):]
		req := map[string]types.KeysAndAttributes{st.cfg.Table: {Keys: chunk}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if attempt >= MaxAttempts {
					return nil, task.Errorf(task.ErrThrottled, "DynamoDB is throttling reads of the counts of %s; retry later", lambda)
				}
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return nil, err
				}
			}
			out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			if err != nil {
				return nil, st.translate(err, "count tasks of %s", lambda)
			}
			for _, item := range out.Responses[st.cfg.Table] {
				for _, status := range task.Statuses {
					if v, ok := item[string(status)].(*types.AttributeValueMemberN); ok {
						c, _ := strconv.Atoi(v.Value)
						counts[status] += c
					}
				}
			}
			req = out.UnprocessedKeys
		}
	}
	for status, c := range counts {
		if c <= 0 { // none, or drifted below none
			delete(counts, status)
		}
	}
	return counts, nil
}

// Recount rebuilds a lambda's counters from its list index and task items, shard by shard. It
// reads every entry the lambda has, finished tasks included until TTL removes them, and each
// task's status from its item (the index does not hold it): about one eventually consistent read
// of ½ RRU per task. It is a repair to run rarely (after a crash left the counts off, or on a
// table written before counters existed), never on a request path. A task that moves while its
// lambda is recounted may be off by one (its move may land on another shard's item).
func (st *Store) Recount(ctx context.Context, lambda string) error {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		return err
	}
	return parallel(st.shards(lambda), func(shard int) error {
		counts := map[task.Status]int64{}
		p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
			TableName: &st.cfg.Table, IndexName: aws.String(ListIndex),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ProjectionExpression:      aws.String("#pk, #sk"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrListPK, "#sk": attrListSK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(listPK(lambda, shard))},
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return st.translate(err, "recount tasks of %s", lambda)
			}
			var keys []map[string]types.AttributeValue
			for _, item := range out.Items {
				if _, id, ok := parseStamp(str(item, attrListSK)); ok {
					keys = append(keys, taskKey(lambda, id))
				}
			}
			for chunk := range slices.Chunk(keys, 100) {
				err := st.batchGetProjected(ctx, "the statuses of "+lambda, types.KeysAndAttributes{
					Keys: chunk, ProjectionExpression: aws.String("#s"), ExpressionAttributeNames: map[string]string{"#s": attrStatus},
				}, func(item map[string]types.AttributeValue) error {
					counts[task.Status(str(item, attrStatus))]++
					return nil
				})
				if err != nil {
					return err
				}
			}
		}
		item := map[string]types.AttributeValue{attrPK: s(countPK(lambda, shard)), attrSK: s(countSK)}
		for status, c := range counts {
			item[string(status)] = n(c)
		}
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.cfg.Table, Item: item, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
		return st.translate(err, "recount tasks of %s", lambda)
	})
}
