package dynamostore

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Redrive writes a redriven task (task.RedriveStore). An ended task's payload item and
// after-list chunks carry a TTL (expirePayload, expireAfter), so a task that lives again gets
// them written afresh, under a new ref and without TTL, before its task item points to them, as
// Create and AddUpstreams do: the task is never seen without them, and a lost race leaves the
// old ones named. The old ones are deleted after, best effort (their TTL removes any left).
//
// t must carry its payload and its After, as a Get reads them. A Get of an ended task whose
// payload item TTL removed already returns it without: the update's condition then finds the
// payload ref still on the item, and Redrive answers task.ErrConflict asking for a new payload.
// Likewise for a list of upstreams TTL removed.
func (st *Store) Redrive(ctx context.Context, t task.Task, prev int64) error {
	if validKey(t.Lambda, t.ID) != nil {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
	}
	if len(t.After) != t.AfterCount {
		return task.Errorf(task.ErrConflict, "task %s/%s: its list of upstreams is gone (the store's retention removed it); it cannot run again", t.Lambda, t.ID)
	}
	ref := rand.Text()
	_, payloadItem, chunks := st.marshal(t, ref)
	extra := map[string]types.AttributeValue{}
	var remove []string
	cond := ""
	switch {
	case payloadItem != nil:
		extra[attrPayloadRef] = s(ref)
		remove = append(remove, attrPayload)
	case len(t.Payload) > 0:
		extra[attrPayload] = &types.AttributeValueMemberB{Value: t.Payload}
		remove = append(remove, attrPayloadRef)
	default:
		// No payload: the task must have had none, not lost one.
		remove = append(remove, attrPayload)
		cond = "attribute_not_exists(" + attrPayloadRef + ")"
	}
	if len(chunks) > 0 {
		extra[attrAfterRef], extra[attrAfterCount] = s(ref), n(int64(len(t.After)))
	}
	var fresh []map[string]types.AttributeValue
	if payloadItem != nil {
		fresh = append(fresh, payloadItem)
	}
	fresh = append(fresh, chunks...)
	if err := st.putItems(ctx, fresh); err != nil { // it deletes what it wrote
		return st.translate(err, "redrive %s/%s", t.Lambda, t.ID)
	}
	old, err := st.updateItem(ctx, t, prev, extra, remove, cond)
	if err != nil {
		if errors.Is(err, task.ErrConflict) || errors.Is(err, task.ErrThrottled) || errors.Is(err, task.ErrTooLarge) || rejected(err) {
			st.deleteItems(ctx, fresh)
		}
		if errors.Is(err, task.ErrConflict) && cond != "" && attrInt(old, attrVersion) == int(prev) {
			return task.Errorf(task.ErrConflict, "task %s/%s: its payload is gone (the store's retention removed it); redrive it with a new payload", t.Lambda, t.ID)
		}
		return err
	}
	var stale []map[string]types.AttributeValue
	if oldRef := str(old, attrPayloadRef); oldRef != "" {
		stale = append(stale, payloadKey(t.Lambda, t.ID, oldRef))
	}
	if aref := str(old, attrAfterRef); aref != "" && len(chunks) > 0 {
		stale = append(stale, afterKeys(t.Lambda, t.ID, aref, attrInt(old, attrAfterCount))...)
	}
	st.deleteItems(ctx, stale)
	return nil
}

var _ task.RedriveStore = (*Store)(nil)
