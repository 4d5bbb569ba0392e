package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Task flows (task.FlowStore; docs/data-model.md, "Task flows"). Two kinds of items, neither in
// an index, and none at all for a task without upstreams or downstreams:
//
//   - A task's After is kept in chunk items under the task's own pk, sk after#<aref>#<chunk>
//     (5 digits), each holding up to afterChunk refs in one string. aref is random per write of
//     the list (Create, AddUpstreams) and the task item names it, with the list's length
//     (after_n). A Create that loses to an existing id, or an AddUpstreams that loses a race,
//     writes chunks nothing names: the winner's list is never touched.
//   - An edge is an item under its upstream's pk, sk down#<lambda>#<id>#<index> of the downstream, with
//     the upstream's index in the downstream's After. Each edge is an item of its own, so a
//     fan-out of 10,000 writes 10,000 small items, spread like any writes to one partition key.

const (
	afterSK = "after#"
	downSK  = "down#"
	// afterChunk is how many refs one chunk item holds: at most about 20 KB (a 64-byte lambda
	// name and a 128-byte id each), 3 KB with ULIDs of the same lambda.
	afterChunk = 100
	// flowWriters bounds the batch writes (25 items each) in flight at once.
	flowWriters = 8
	// flowReaders bounds the BatchGetItem calls (100 keys each) of GetMany in flight at once.
	flowReaders = 4
	// afterRereads is how often a read that met a list being replaced reads the task again.
	afterRereads = 3
	// maxDownstreamsPage bounds a page of Downstreams.
	maxDownstreamsPage = 1000
)

// errAfterMoved says that a task's after-list chunks were not all there: an AddUpstreams replaced
// the list between the read of the task item and that of its chunks. Reading again resolves it.
var errAfterMoved = errors.New("dynamostore: the task's upstreams were replaced meanwhile")

func afterChunkSK(aref string, chunk int) string {
	return afterSK + aref + "#" + fmt.Sprintf("%05d", chunk)
}

// afterChunks returns the chunk items of t's After, named by aref.
func afterChunks(t task.Task, aref string) []map[string]types.AttributeValue {
	pk := s(taskPK(t.Lambda, t.ID))
	var items []map[string]types.AttributeValue
	for refs := range slices.Chunk(t.After, afterChunk) {
		items = append(items, map[string]types.AttributeValue{
			attrPK: pk, attrSK: s(afterChunkSK(aref, len(items))), attrRefs: s(encodeRefs(t.Lambda, refs)),
		})
	}
	return items
}

// encodeRefs writes refs separated by spaces: a ref of the task's own lambda as its bare id,
// another's as lambda#id. Neither names nor ids hold a space or '#'.
func encodeRefs(lambda string, refs []task.Ref) string {
	var b strings.Builder
	for i, r := range refs {
		if i > 0 {
			b.WriteByte(' ')
		}
		if r.Lambda != lambda {
			b.WriteString(r.Lambda + "#")
		}
		b.WriteString(r.ID)
	}
	return b.String()
}

func decodeRefs(lambda, v string) []task.Ref {
	fields := strings.Fields(v)
	refs := make([]task.Ref, len(fields))
	for i, f := range fields {
		if l, id, ok := strings.Cut(f, "#"); ok {
			refs[i] = task.Ref{Lambda: l, ID: id}
		} else {
			refs[i] = task.Ref{Lambda: lambda, ID: f}
		}
	}
	return refs
}

// readAfter reads After[from:to] of a task from its chunk items, strongly consistent: one Query
// over the chunks that cover the range. errAfterMoved if a chunk is missing.
func (st *Store) readAfter(ctx context.Context, lambda, id, aref string, from, to int) ([]task.Ref, error) {
	if from >= to {
		return nil, nil
	}
	if aref == "" {
		return nil, fmt.Errorf("dynamostore: task %s/%s has upstreams but names no list of them", lambda, id)
	}
	first, last := from/afterChunk, (to-1)/afterChunk
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(taskPK(lambda, id)), ":lo": s(afterChunkSK(aref, first)), ":hi": s(afterChunkSK(aref, last))},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	refs := make([]task.Ref, 0, (last-first+1)*afterChunk)
	next := first
	for {
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, st.translate(err, "read the upstreams of %s/%s", lambda, id)
		}
		for _, item := range out.Items {
			if str(item, attrSK) != afterChunkSK(aref, next) {
				return nil, errAfterMoved
			}
			refs = append(refs, decodeRefs(lambda, str(item, attrRefs))...)
			next++
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	off := from - first*afterChunk
	if next != last+1 || len(refs) < to-first*afterChunk {
		return nil, errAfterMoved
	}
	return refs[off : to-first*afterChunk], nil
}

// Upstreams returns down's After[from : from+limit]: a read of its task item (for the list's name
// and length), then of the chunks covering the range.
func (st *Store) Upstreams(ctx context.Context, down task.Ref, from, limit int) ([]task.Ref, error) {
	if validKey(down.Lambda, down.ID) != nil {
		return nil, task.Errorf(task.ErrNotFound, "task %s not found", down)
	}
	if from < 0 || limit < 0 {
		return nil, task.Errorf(task.ErrInvalid, "upstreams of %s: from and limit must not be negative", down)
	}
	for range afterRereads {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &st.cfg.Table, Key: taskKey(down.Lambda, down.ID), ConsistentRead: aws.Bool(true),
			ProjectionExpression:     aws.String("#r, #n, #t"),
			ExpressionAttributeNames: map[string]string{"#r": attrAfterRef, "#n": attrAfterCount, "#t": attrTomb},
			ReturnConsumedCapacity:   types.ReturnConsumedCapacityTotal,
		})
		if err != nil {
			return nil, st.translate(err, "read the upstreams of %s", down)
		}
		if out.Item == nil || isTombstone(out.Item) {
			return nil, task.Errorf(task.ErrNotFound, "task %s not found", down)
		}
		to := min(from+limit, attrInt(out.Item, attrAfterCount))
		refs, err := st.readAfter(ctx, down.Lambda, down.ID, str(out.Item, attrAfterRef), from, to)
		if !errors.Is(err, errAfterMoved) {
			return refs, err
		}
	}
	return nil, task.Errorf(task.ErrConflict, "task %s: its upstreams keep changing; try again", down)
}

// AddUpstreams writes t's whole After under a new name, then updates the task item like Update,
// pointing it to the new list, if its version is still prev. A lost race leaves the new chunks
// unnamed (and deletes them), never a mixed list. The old chunks are deleted after, best effort.
// from is unused: the list is rewritten whole, so that no write touches the list a reader sees.
func (st *Store) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	if validKey(t.Lambda, t.ID) != nil {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	}
	if len(t.After) != t.AfterCount || t.AfterCount == 0 {
		return fmt.Errorf("dynamostore: add upstreams to %s/%s: the task carries %d of its %d upstreams", t.Lambda, t.ID, len(t.After), t.AfterCount)
	}
	aref := rand.Text()
	chunks := afterChunks(t, aref)
	if err := st.putItems(ctx, chunks); err != nil {
		return st.translate(err, "add upstreams to %s/%s", t.Lambda, t.ID)
	}
	extra := map[string]types.AttributeValue{attrAfterRef: s(aref), attrAfterCount: n(int64(len(t.After)))}
	if t.Trigger != "" {
		extra[attrTrigger] = s(t.Trigger) // a task that had no upstreams had none
	}
	old, err := st.update(ctx, t, prev, extra)
	if err != nil {
		// Refused: nothing names the new chunks. (After a timeout the update may have been
		// applied: they are left.)
		if errors.Is(err, task.ErrConflict) || errors.Is(err, task.ErrThrottled) || errors.Is(err, task.ErrTooLarge) || rejected(err) {
			st.deleteItems(ctx, chunks)
		}
		return err
	}
	if oldRef := str(old, attrAfterRef); oldRef != "" {
		st.deleteItems(ctx, afterKeys(t.Lambda, t.ID, oldRef, attrInt(old, attrAfterCount)))
	}
	return nil
}

// afterKeys are the keys of the chunk items of a list of count refs.
func afterKeys(lambda, id, aref string, count int) []map[string]types.AttributeValue {
	keys := make([]map[string]types.AttributeValue, (count+afterChunk-1)/afterChunk)
	for i := range keys {
		keys[i] = map[string]types.AttributeValue{attrPK: s(taskPK(lambda, id)), attrSK: s(afterChunkSK(aref, i))}
	}
	return keys
}

// expireAfter gives a finished task's chunk items the TTL of its task item, like expirePayload:
// best effort, a few at a time, once per task.
func (st *Store) expireAfter(ctx context.Context, t task.Task, aref string, count int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	keys := afterKeys(t.Lambda, t.ID, aref, count)
	_ = parallelN(len(keys), payloadWriters, func(i int) error {
		_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &st.cfg.Table, Key: keys[i],
			UpdateExpression:          aws.String("SET #e = :e"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeNames:  map[string]string{"#e": attrExpires},
			ExpressionAttributeValues: map[string]types.AttributeValue{":e": n(st.expires(t))},
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		})
		return err
	})
}

// edgeSK keys an edge by its downstream and the index: a write of a stale edge (a create
// refused for a taken id, an AddUpstreams that lost its race) then adds an item that the
// consumer's check against the downstream's list sets aside, and never rewrites the edge of the
// upstream's real place in that list.
func edgeSK(e task.Edge) string {
	return downSK + e.Down.Lambda + "#" + e.Down.ID + "#" + fmt.Sprintf("%05d", e.Index)
}

// AddEdges puts one item per edge under its upstream's pk. A Put of an edge already there
// rewrites it unchanged, so writing again changes nothing.
func (st *Store) AddEdges(ctx context.Context, edges []task.Edge) error {
	byKey := make(map[[2]string]int, len(edges)) // an edge listed twice is written once: the last
	items := make([]map[string]types.AttributeValue, 0, len(edges))
	for _, e := range edges {
		if err := validKey(e.Up.Lambda, e.Up.ID); err != nil {
			return err
		}
		if err := validKey(e.Down.Lambda, e.Down.ID); err != nil {
			return err
		}
		if e.Index < 0 || e.Index >= task.MaxAfter {
			return task.Errorf(task.ErrInvalid, "edge %s → %s: index %d is out of range", e.Up, e.Down, e.Index)
		}
		item := map[string]types.AttributeValue{attrPK: s(taskPK(e.Up.Lambda, e.Up.ID)), attrSK: s(edgeSK(e)), attrIndex: n(int64(e.Index))}
		k := [2]string{taskPK(e.Up.Lambda, e.Up.ID), edgeSK(e)}
		if i, ok := byKey[k]; ok {
			items[i] = item
			continue
		}
		byKey[k] = len(items)
		items = append(items, item)
	}
	return st.translate(st.putItems(ctx, items), "add %d edges", len(items))
}

// Downstreams returns a page of the edges under up, in sort key order (by the downstream's lambda,
// then id): one strongly consistent Query. The cursor is the last edge's sort key.
func (st *Store) Downstreams(ctx context.Context, up task.Ref, cursor string, limit int) ([]task.Edge, string, error) {
	if validKey(up.Lambda, up.ID) != nil {
		return nil, "", nil
	}
	if limit <= 0 || limit > maxDownstreamsPage {
		limit = maxDownstreamsPage
	}
	lo := downSK
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || !strings.HasPrefix(string(b), downSK) {
			return nil, "", task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(cursor))
		}
		lo = string(b) + "\x00" // the smallest key after the cursor's
	}
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(taskPK(up.Lambda, up.ID)), ":lo": s(lo), ":hi": s(strings.TrimSuffix(downSK, "#") + "$")},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	var edges []task.Edge
	for {
		// One edge more than the page tells whether another page follows.
		in.Limit = aws.Int32(int32(limit + 1 - len(edges)))
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, "", st.translate(err, "read the downstreams of %s", up)
		}
		for _, item := range out.Items {
			l, rest, ok := strings.Cut(strings.TrimPrefix(str(item, attrSK), downSK), "#")
			id, _, ok2 := strings.Cut(rest, "#")
			if !ok || !ok2 {
				continue
			}
			edges = append(edges, task.Edge{Up: up, Down: task.Ref{Lambda: l, ID: id}, Index: attrInt(item, attrIndex)})
		}
		if len(edges) > limit {
			return edges[:limit], base64.RawURLEncoding.EncodeToString([]byte(edgeSK(edges[limit-1]))), nil
		}
		if out.LastEvaluatedKey == nil {
			return edges, "", nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// GetMany reads tasks by key like GetState (no payload, no After): BatchGetItem, strongly
// consistent, 100 distinct keys per call, a few calls at once. It asks for StateAttributes
// only, never a payload, so that IAM can let a lambda's status function read its upstreams'
// results in other lambdas without their payloads (dynamodb:Attributes).

func (st *Store) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	tasks := make([]task.Task, len(refs))
	at := make(map[string][]int, len(refs)) // pk → where its task goes
	var keys []map[string]types.AttributeValue
	for i, r := range refs {
		if validKey(r.Lambda, r.ID) != nil {
			continue // no such task
		}
		pk := taskPK(r.Lambda, r.ID)
		if _, ok := at[pk]; !ok {
			keys = append(keys, taskKey(r.Lambda, r.ID))
		}
		at[pk] = append(at[pk], i)
	}
	chunks := slices.Collect(slices.Chunk(keys, 100))
	var mu sync.Mutex
	err := parallelN(len(chunks), flowReaders, func(c int) error {
		ka := types.KeysAndAttributes{Keys: chunks[c], ConsistentRead: aws.Bool(true), ProjectionExpression: &stateProjection, ExpressionAttributeNames: stateNames}
		return st.batchGetProjected(ctx, "upstream tasks", ka, func(item map[string]types.AttributeValue) error {
			if isTombstone(item) {
				return nil // no task
			}
			t, _, err := unmarshal(item)
			if err != nil {
				return err
			}
			t.Payload = nil
			mu.Lock()
			defer mu.Unlock()
			for _, i := range at[str(item, attrPK)] {
				tasks[i] = t
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return tasks, nil
}

// putItems writes items with BatchWriteItem, 25 a call, flowWriters calls at once, asking again
// for what DynamoDB left unprocessed. If it fails, the items it may have written are deleted,
// best effort: callers write items no one reads yet.
func (st *Store) putItems(ctx context.Context, items []map[string]types.AttributeValue) error {
	reqs := make([]types.WriteRequest, len(items))
	for i, item := range items {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: item}}
	}
	err := st.batchWrite(ctx, reqs)
	if err != nil {
		st.deleteItems(ctx, items)
	}
	return err
}

// deleteItems deletes the items with the keys of items, best effort, on a deadline of its own
// (see deletePayloads): an item it misses costs storage only.
func (st *Store) deleteItems(ctx context.Context, items []map[string]types.AttributeValue) {
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	reqs := make([]types.WriteRequest, len(items))
	for i, item := range items {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{attrPK: item[attrPK], attrSK: item[attrSK]}}}
	}
	_ = st.batchWrite(ctx, reqs)
}

func (st *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	calls := slices.Collect(slices.Chunk(reqs, 25))
	return parallelN(len(calls), flowWriters, func(c int) error {
		req := map[string][]types.WriteRequest{st.cfg.Table: calls[c]}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if attempt >= MaxAttempts {
					return task.Errorf(task.ErrThrottled, "DynamoDB is throttling writes; retry later")
				}
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return err
				}
			}
			out, err := st.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			if err != nil {
				return err
			}
			req = out.UnprocessedItems
		}
		return nil
	})
}

// parallelN runs fn for 0..n-1, at most limit at once, and returns the errors joined. It stops
// starting new calls after the first error.
func parallelN(n, limit int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var failed sync.Once
	stop := make(chan struct{})
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-stop:
		}
		select {
		case <-stop:
			wg.Wait()
			return errors.Join(errs...)
		default:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if errs[i] = fn(i); errs[i] != nil {
				failed.Do(func() { close(stop) })
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func attrInt(item map[string]types.AttributeValue, name string) int {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	i, _ := strconv.Atoi(v.Value) // written by this store: a number
	return i
}

// StateAttributes are the attributes of a task item that GetMany reads: all but the payload.
var StateAttributes = []string{
	attrPK, attrSK, attrDuePK, attrDueSK, attrListPK, attrListSK, attrExpires, attrLambda, attrID,
	attrCollection, attrPriority, attrStatus, attrPayloadRef, attrResult, attrError, attrAttempts,
	attrMaxAttempts, attrRunAt, attrDeadline, attrNextTrigger, attrCreatedAt, attrUpdatedAt,
	attrVersion, attrLease, attrSpec, attrParked, attrAfterCount, attrAfterRef, attrTrigger,
	attrSettled, attrDownstream, attrNotifyCursor, attrCancel, attrNotBefore, attrHandBacks,
	attrAttemptSeq, attrStartedAt, attrEndedAt, attrWorker, attrSnoozes, attrTomb, attrMessage, attrMessageFor, attrKey, attrRateSlot,
}

// stateProjection and stateNames are StateAttributes as a projection expression.
var stateProjection, stateNames = func() (string, map[string]string) {
	names := make(map[string]string, len(StateAttributes))
	refs := make([]string, len(StateAttributes))
	for i, a := range StateAttributes {
		refs[i] = fmt.Sprintf("#s%d", i)
		names[refs[i]] = a
	}
	return strings.Join(refs, ", "), names
}()
