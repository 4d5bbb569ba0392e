package dynamostore

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// MaxTransactItems is how many entries CreateTransactItems returns at most: the task item and,
// for a payload over InlinePayload, its payload item. With the app's own entries they must stay
// within DynamoDB's 100 per transaction.
const MaxTransactItems = 2

// CreateTransactItems returns the TransactWriteItems entries that create t, a task made by
// task.New, for an app to put in its own transaction beside its own writes: the task exists if
// and only if that transaction commits. The task item comes first, written only if the id is
// free; a payload over InlinePayload follows in an item of its own. The task is waiting, due at
// its run time, so the consumer's sweep enqueues it like any other: nothing is sent to a queue.
//
// A replay of a taken id cancels the whole transaction: DynamoDB answers a
// TransactionCanceledException whose reason at the task item's index is ConditionalCheckFailed
// (CreateRefused turns it into task.ErrExists). A transaction cannot answer with the stored task
// instead; the app reads it with Get if it wants it.
//
// The lambda's task counts are not in the transaction: every counter write of the consumer would
// cancel the app's transactions that meet it on the same item (TransactionConflict). As Create
// does, call Created once the transaction has committed; until then, or if it is never called,
// the counts miss the task until Recount. Tasks with upstreams (After) are refused: a flow's
// upstreams are linked by the frontend, outside any one transaction.
func (st *Store) CreateTransactItems(t task.Task) ([]types.TransactWriteItem, error) {
	if err := validKey(t.Lambda, t.ID); err != nil {
		return nil, err
	}
	if len(t.After) > 0 {
		return nil, task.Errorf(task.ErrInvalid, "task %q of lambda %s: a task with upstreams cannot be created in a transaction", t.ID, t.Lambda)
	}
	if t.Nonce != "" {
		return nil, task.Errorf(task.ErrInvalid, "task %q of lambda %s: a task created in a transaction has no message sent first", t.ID, t.Lambda)
	}
	item, payload, _ := st.marshal(t, rand.Text())
	cond, names, values := createCondition("")
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: &st.cfg.Table, Item: item,
		ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}
	if payload != nil {
		// Its key is fresh (the ref is random), so it needs no condition.
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &st.cfg.Table, Item: payload}})
	}
	return items, nil
}

// Created counts tasks whose CreateTransactItems entries were committed, as Create counts the
// task it writes. Call it once per committed transaction.
func (st *Store) Created(ctx context.Context, tasks ...task.Task) {
	st.countNew(ctx, tasks)
}

// CreateRefused translates the error of an app's TransactWriteItems that held t's entries, the
// first of them at index at: task.ErrExists if t's id was taken, else err unchanged.
func CreateRefused(err error, t task.Task, at int) error {
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) && at < len(cancelled.CancellationReasons) {
		if r := cancelled.CancellationReasons[at]; aws.ToString(r.Code) == "ConditionalCheckFailed" {
			return createRefused(t, r.Item)
		}
	}
	return err
}
