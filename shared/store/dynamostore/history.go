package dynamostore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// A task's history (task.HistoryStore) is kept in items of their own, one per ended attempt,
// beside the task item under its pk: attempt#<number>. The task item keeps only the latest
// attempt's start, end and worker, which its claim and its end write anyway, so:
//   - a task that succeeds at its first attempt writes no attempt item: its history is read
//     from the task item (task.Task.LastAttempt). Neither does any success, the last attempt of
//     a task;
//   - each failed attempt (retriable, timed out, fatal, cancelled) writes one item, of about
//     200 bytes and its error (at most task.MaxErrorBytes): 1 to 5 write units;
//   - an attempt that pushes the oldest one out of the history leaves it to expire: the history
//     reads the latest task.MaxHistory items only;
//   - the task item that every read and transition pays for does not grow with the history;
//   - an attempt's log (task.Attempt.Log, up to task.MaxLogBytes) is not kept: it would cost up
//     to 16 write units more per failed attempt, and on AWS the handler's logs are in
//     CloudWatch already.
//
// The item is written with UpdateItem, not PutItem: every role that ends attempts (the status
// function, the executors, the consumer, the API) may update its lambda's items, and no role
// needs more than that for the history. The item is written just after the transition that ends its attempt, with a deadline of its
// own: a process that dies in between loses that record (the task's state is not affected),
// and the history shows a gap there (docs/guarantees.md). It expires, by TTL, Retention after
// its attempt ended, like an ended task.
const attemptSK = "attempt#"

// attemptKey is the key of attempt number of a task.
func attemptKey(lambda, id string, number int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(taskPK(lambda, id)), attrSK: s(attemptSortKey(number))}
}

// attemptSortKey is the sort key of attempt number, zero-padded so that keys sort as numbers.
func attemptSortKey(number int) string { return fmt.Sprintf("%s%010d", attemptSK, number) }

// attrOutcome is an attempt item's outcome (task.Outcome).
const attrOutcome = "o"

// recordAttempt writes t.Ended, the attempt t's transition ended, if there is one and it failed
// (a success is read from the task item). Best effort, after the transition was written: see the
// comment on attemptSK. It writes the whole record, removing what the attempt has not: the item
// may be one left by an earlier task of the same id (TTL deletes items one by one, late).
func (st *Store) recordAttempt(ctx context.Context, t task.Task) {
	a := t.Ended
	if a == nil || a.Outcome == task.OutcomeSuccess {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	set := map[string]types.AttributeValue{
		attrAttemptSeq: n(int64(a.Number)),
		attrEndedAt:    n(a.EndedAt.UnixNano()),
		attrOutcome:    s(string(a.Outcome)),
		attrExpires:    n(a.EndedAt.Add(st.cfg.Retention).Unix()),
	}
	if !a.StartedAt.IsZero() {
		set[attrStartedAt] = n(a.StartedAt.UnixNano())
	}
	if a.Error != "" {
		set[attrError] = s(a.Error)
	}
	if a.Worker != "" {
		set[attrWorker] = s(a.Worker)
	}
	logAttrs(set, a.LogLocation, a.Worker)
	var assign, remove []string
	names, values := map[string]string{}, map[string]types.AttributeValue{}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		assign = append(assign, "#"+name+" = :"+name)
		names["#"+name], values[":"+name] = name, set[name]
	}
	for _, name := range []string{attrStartedAt, attrError, attrWorker, attrLogGroup, attrLogStream, attrRequestID} {
		if _, ok := set[name]; !ok {
			remove = append(remove, "#"+name)
			names["#"+name] = name
		}
	}
	expr := "SET " + strings.Join(assign, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	if _, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.cfg.Table, Key: attemptKey(t.Lambda, t.ID, a.Number), UpdateExpression: &expr,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}); err != nil {
		st.cfg.Logger.Warn("the record of an ended attempt could not be written; the task's history misses it",
			"lambda", t.Lambda, "task_id", t.ID, "attempt", a.Number, "err", err)
	}
}

// Attempts returns a task's history (task.HistoryStore), or task.ErrNotFound. It reads the
// task's state (1 read unit), and, for a task with more than one attempt or a failed one, its
// latest attempt items with one strongly consistent Query: a read unit per 4 KB of them, at most
// task.MaxHistory × (task.MaxErrorBytes + 200 bytes), 22 units.
//
// It reads only this task's records: those numbered up to its count (AttemptSeq), and not
// expired before it was created. A task created again under the id of one that TTL removed may
// find that one's items still there (TTL deletes each item on its own, up to days late): they
// expired no later than the old task item, so before the new task was created, and those
// numbered past the new task's count would fill the Query's page.
func (st *Store) Attempts(ctx context.Context, lambda, id string) (task.History, error) {
	t, err := st.GetState(ctx, lambda, id)
	if err != nil {
		return task.History{}, err
	}
	last, ended := t.LastAttempt()
	if t.AttemptSeq == 0 || ended && t.AttemptSeq == 1 {
		var kept []task.Attempt
		if ended {
			kept = append(kept, last)
		}
		return task.NewHistory(kept), nil
	}
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                &st.cfg.Table,
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :first AND :last"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": s(taskPK(lambda, id)), ":first": s(attemptSortKey(1)), ":last": s(attemptSortKey(t.AttemptSeq)),
		},
		ScanIndexForward:       aws.Bool(false),
		Limit:                  aws.Int32(task.MaxHistory),
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return task.History{}, st.translate(err, "attempts of %s/%s", lambda, id)
	}
	kept := make([]task.Attempt, 0, len(out.Items)+1)
	for _, item := range out.Items {
		if expires := attrInt(item, attrExpires); expires > 0 && int64(expires) <= t.CreatedAt.Unix() {
			continue // expired before this task was created: an earlier task's of the same id
		}
		a := task.Attempt{
			Number: attrInt(item, attrAttemptSeq), EndedAt: nanosAttr(item, attrEndedAt), StartedAt: nanosAttr(item, attrStartedAt),
			Outcome: task.Outcome(str(item, attrOutcome)), Error: str(item, attrError), Worker: str(item, attrWorker),
		}
		a.LogLocation = logLocation(item, a.Worker)
		if a.Number > 0 {
			kept = append(kept, a)
		}
	}
	if ended {
		kept = append(kept, last)
	}
	return task.NewHistory(kept), nil
}

// nanosAttr reads a time kept as unix nanoseconds, zero if absent.
func nanosAttr(item map[string]types.AttributeValue, name string) time.Time {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return time.Time{}
	}
	var ns int64
	if _, err := fmt.Sscan(v.Value, &ns); err != nil {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
