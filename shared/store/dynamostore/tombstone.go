package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Tombstones. A message sent before its task was written (task.Message.Nonce) may be received
// before the write lands, or after a write that never will. Its claim then writes a tombstone at
// the task's key (Bury): the set of such nonces, a TTL, and nothing else, so that no index holds
// it and no read takes it for a task. A create overwrites a tombstone unless it carries one of
// its nonces: that create's message was dropped, and it fails with task.ErrBuried.

// createCondition is the condition of a task item's put: the key is free, or holds a tombstone
// that did not bury nonce.
func createCondition(nonce string) (cond *string, names map[string]string, values map[string]types.AttributeValue) {
	names = map[string]string{"#tomb": attrTomb}
	if nonce == "" {
		return aws.String("attribute_not_exists(pk) OR attribute_exists(#tomb)"), names, nil
	}
	return aws.String("attribute_not_exists(pk) OR (attribute_exists(#tomb) AND NOT contains(#tomb, :nonce))"),
		names, map[string]types.AttributeValue{":nonce": s(nonce)}
}

// isTombstone reports whether an item at a task's key is a tombstone, not a task.
func isTombstone(item map[string]types.AttributeValue) bool {
	_, ok := item[attrTomb]
	return ok
}

// createRefused is the error of a create of t whose condition failed on old, the item at its key.
func createRefused(t task.Task, old map[string]types.AttributeValue) error {
	if isTombstone(old) {
		return task.Errorf(task.ErrBuried, "task %q of lambda %s: its message was dropped before it was written; send another", t.ID, t.Lambda)
	}
	return task.Errorf(task.ErrExists, "task %q of lambda %s already exists", t.ID, t.Lambda)
}

// Bury adds nonce to the tombstone at the task's key, or writes one, unless a task is there
// (task.ErrExists). It is an UpdateItem, as the attempt items are (history.go): the roles that
// claim may update their lambda's task items, and need no PutItem. The TTL is until, renewed by
// each nonce buried.
func (st *Store) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	if err := validKey(lambda, id); err != nil {
		return err
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.cfg.Table, Key: taskKey(lambda, id),
		UpdateExpression:          aws.String("ADD #tomb :nonce SET #exp = :exp"),
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR attribute_exists(#tomb)"),
		ExpressionAttributeNames:  map[string]string{"#tomb": attrTomb, "#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":nonce": &types.AttributeValueMemberSS{Value: []string{nonce}}, ":exp": n(until.Unix())},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrExists, "task %q of lambda %s exists", id, lambda)
	}
	return st.translate(err, "bury a message of %s/%s", lambda, id)
}
