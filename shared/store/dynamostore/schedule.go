package dynamostore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Schedules (task/schedule.go) are items of one partition per lambda, sched#<lambda>, their sort
// key the schedule id, so that a lambda's list is one Query. An active schedule has a due entry
// under the same partition key in the due index, its sort key <next fire>#<id>: the consumer's
// read of what is due is one Query of that partition's range up to now, and a paused schedule,
// which has no entry, costs it nothing. Each pass's firings rewrite the item, with their tasks, in
// one transaction conditional on its version and incarnation (FireSchedule), so the entry moves
// with it (docs/data-model.md, "Schedules").

const (
	schedulePKPrefix = "sched#"
	attrState        = "state"
	attrBody         = "body"        // S: the schedule as JSON
	attrIncarnation  = "incarnation" // S: Schedule.Incarnation, for the conditions of writes
)

func schedulePK(lambda string) string { return schedulePKPrefix + lambda }

func scheduleKey(lambda, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(schedulePK(lambda)), attrSK: s(id)}
}

// ScheduleKeyPattern is the partition key of a lambda's schedules, as an IAM
// dynamodb:LeadingKeys pattern.
func ScheduleKeyPattern(lambda string) string { return schedulePK(lambda) }

// storedSchedule is a schedule's body: the schedule with its request's fingerprint, its
// incarnation and its next firing, which an answer leaves out.
type storedSchedule struct {
	task.Schedule
	Spec        string    `json:"spec"`
	Incarnation string    `json:"incarnation,omitempty"`
	NextFire    time.Time `json:"next_fire"`
}

func scheduleItem(sc task.Schedule) (map[string]types.AttributeValue, error) {
	if err := validKey(sc.Lambda, sc.ID); err != nil {
		return nil, err
	}
	sc.NextFires, sc.FireIDTag = nil, ""
	body, err := json.Marshal(storedSchedule{Schedule: sc, Spec: sc.Spec, Incarnation: sc.Incarnation, NextFire: sc.NextFire})
	if err != nil {
		return nil, err
	}
	item := scheduleKey(sc.Lambda, sc.ID)
	item[attrLambda], item[attrID], item[attrState] = s(sc.Lambda), s(sc.ID), s(sc.State)
	item[attrVersion], item[attrNextTrigger], item[attrBody] = n(sc.Version), n(sc.NextFire.UnixNano()), s(string(body))
	if sc.Incarnation != "" {
		item[attrIncarnation] = s(sc.Incarnation)
	}
	if sc.State == task.ScheduleActive {
		item[attrDuePK], item[attrDueSK] = s(schedulePK(sc.Lambda)), s(stamp(sc.NextFire)+"#"+sc.ID)
	}
	return item, nil
}

func unmarshalSchedule(item map[string]types.AttributeValue) (task.Schedule, error) {
	var st storedSchedule
	if err := json.Unmarshal([]byte(str(item, attrBody)), &st); err != nil {
		return task.Schedule{}, fmt.Errorf("a schedule's body: %w", err)
	}
	st.Schedule.Spec, st.Schedule.Incarnation, st.Schedule.NextFire = st.Spec, st.Incarnation, st.NextFire
	return st.Schedule, nil
}

// CreateSchedule puts a new schedule item, conditional on there being none.
func (st *Store) CreateSchedule(ctx context.Context, sc task.Schedule) error {
	item, err := scheduleItem(sc)
	if err != nil {
		return err
	}
	_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.cfg.Table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrExists, "schedule %q of lambda %s already exists", sc.ID, sc.Lambda)
	}
	return st.translate(err, "create schedule %s", sc)
}

// GetSchedule reads one schedule item, strongly.
func (st *Store) GetSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	if err := validKey(lambda, id); err != nil {
		return task.Schedule{}, err
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.cfg.Table, Key: scheduleKey(lambda, id), ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return task.Schedule{}, st.translate(err, "get schedule %s/%s", lambda, id)
	}
	if out.Item == nil {
		return task.Schedule{}, task.Errorf(task.ErrNotFound, "schedule %q of lambda %s not found", id, lambda)
	}
	return unmarshalSchedule(out.Item)
}

// ListSchedules queries the lambda's schedule partition in id order, strongly, limit items a page.
func (st *Store) ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]task.Schedule, string, error) {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		return nil, "", err
	}
	limit = max(1, min(limit, task.MaxListLimit))
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(limit)),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(schedulePK(lambda))},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	if cursor != "" {
		if err := task.ValidateID("cursor", cursor); err != nil {
			return nil, "", err
		}
		in.ExclusiveStartKey = scheduleKey(lambda, cursor)
	}
	out, err := st.db.Query(ctx, in)
	if err != nil {
		return nil, "", st.translate(err, "list schedules of %s", lambda)
	}
	list := make([]task.Schedule, 0, len(out.Items))
	for _, item := range out.Items {
		sc, err := unmarshalSchedule(item)
		if err != nil {
			return nil, "", err
		}
		list = append(list, sc)
	}
	next := ""
	if out.LastEvaluatedKey != nil && len(list) > 0 {
		next = list[len(list)-1].ID
	}
	return list, next, nil
}

// UpdateSchedule puts the schedule item again, conditional on its stored version.
func (st *Store) UpdateSchedule(ctx context.Context, sc task.Schedule, prev int64) error {
	item, err := scheduleItem(sc)
	if err != nil {
		return err
	}
	cond, values := sameSchedule(sc, prev)
	_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.cfg.Table, Item: item, ConditionExpression: cond, ExpressionAttributeValues: values,
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrConflict, "schedule %s changed or was deleted", sc)
	}
	return st.translate(err, "update schedule %s", sc)
}

// sameSchedule is the condition of a write over a schedule read at version prev: that version,
// and sc's incarnation (none on a schedule stored before incarnations).
func sameSchedule(sc task.Schedule, prev int64) (*string, map[string]types.AttributeValue) {
	values := map[string]types.AttributeValue{":prev": n(prev)}
	if sc.Incarnation == "" {
		return aws.String("version = :prev AND attribute_not_exists(incarnation)"), values
	}
	values[":inc"] = s(sc.Incarnation)
	return aws.String("version = :prev AND incarnation = :inc"), values
}

// FireSchedule writes sc over version prev and creates the tasks whose ids are free in one
// transaction: the schedule's Put, conditional on its version and incarnation, and each task's,
// conditional on its id being free. A task whose id is taken cancels the transaction; it is sent
// again without that task (the firing was made), so a conflict on the schedule alone ends it.
// Payload items are written first, as by CreateBatch.
func (st *Store) FireSchedule(ctx context.Context, sc task.Schedule, prev int64, tasks []task.Task) ([]bool, error) {
	if len(tasks) > task.MaxFiringsPerWrite {
		return nil, task.Errorf(task.ErrInvalid, "a firing write holds at most %d tasks, got %d", task.MaxFiringsPerWrite, len(tasks))
	}
	schedItem, err := scheduleItem(sc)
	if err != nil {
		return nil, err
	}
	cond, values := sameSchedule(sc, prev)
	taskItems := make([]map[string]types.AttributeValue, len(tasks))
	payloads := make([]map[string]types.AttributeValue, len(tasks))
	for i, t := range tasks {
		if err := validKey(t.Lambda, t.ID); err != nil {
			return nil, err
		}
		taskItems[i], payloads[i], _ = st.marshal(t, rand.Text()) // a firing's task waits for no upstream
	}
	if err := st.putPayloads(ctx, nonNil(payloads)...); err != nil {
		return nil, st.translate(err, "fire schedule %s", sc)
	}
	created := make([]bool, len(tasks))
	for i := range created {
		created[i] = true
	}
	for {
		items := []types.TransactWriteItem{{Put: &types.Put{
			TableName: &st.cfg.Table, Item: schedItem, ConditionExpression: cond, ExpressionAttributeValues: values,
		}}}
		var in []int // the index in tasks of each task item
		for i, item := range taskItems {
			if created[i] {
				cond, names, _ := createCondition("") // written first: a tombstone does not hinder it
				items = append(items, types.TransactWriteItem{Put: &types.Put{
					TableName: &st.cfg.Table, Item: item, ConditionExpression: cond, ExpressionAttributeNames: names,
				}})
				in = append(in, i)
			}
		}
		_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		if err == nil {
			break
		}
		taken, conflict := false, false
		var cancelled *types.TransactionCanceledException
		if errors.As(err, &cancelled) {
			for j, r := range cancelled.CancellationReasons {
				if aws.ToString(r.Code) != "ConditionalCheckFailed" {
					continue
				}
				if j == 0 {
					conflict = true
				} else if j-1 < len(in) {
					created[in[j-1]], taken = false, true
				}
			}
		}
		if conflict || !taken {
			if rejected(err) {
				st.deletePayloads(ctx, nonNil(payloads)...)
			}
			if conflict {
				return nil, task.Errorf(task.ErrConflict, "schedule %s changed or was deleted", sc)
			}
			return nil, st.translate(err, "fire schedule %s", sc)
		}
	}
	var made []task.Task
	var unused []map[string]types.AttributeValue
	for i, t := range tasks {
		if created[i] {
			made = append(made, t)
		} else if payloads[i] != nil {
			unused = append(unused, payloads[i])
		}
	}
	st.deletePayloads(ctx, unused...)
	st.countNew(ctx, made)
	return created, nil
}

func nonNil(items []map[string]types.AttributeValue) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, item := range items {
		if item != nil {
			out = append(out, item)
		}
	}
	return out
}

// DeleteSchedule deletes the schedule item, conditional on its being there.
func (st *Store) DeleteSchedule(ctx context.Context, lambda, id string) error {
	if err := validKey(lambda, id); err != nil {
		return err
	}
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &st.cfg.Table, Key: scheduleKey(lambda, id), ConditionExpression: aws.String("attribute_exists(pk)"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if isConditionFailed(err) {
		return task.Errorf(task.ErrNotFound, "schedule %q of lambda %s not found", id, lambda)
	}
	return st.translate(err, "delete schedule %s/%s", lambda, id)
}

// DueSchedules queries the lambda's due range of schedules up to before (an eventually
// consistent index read: a hint), then reads the items it names strongly and keeps those still
// active and due.
func (st *Store) DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]task.Schedule, error) {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		return nil, err
	}
	limit = max(1, min(limit, 100)) // one BatchGetItem
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &st.cfg.Table, IndexName: aws.String(DueIndex), Limit: aws.Int32(int32(limit)),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrDuePK, "#sk": attrDueSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(schedulePK(lambda)), ":lo": s("0"), ":hi": s(stamp(before) + "$")},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		return nil, st.translate(err, "query due schedules of %s", lambda)
	}
	if len(out.Items) == 0 {
		return nil, nil
	}
	keys := make([]map[string]types.AttributeValue, 0, len(out.Items))
	seen := map[string]bool{}
	for _, item := range out.Items {
		if id := str(item, attrID); id != "" && !seen[id] {
			seen[id] = true
			keys = append(keys, scheduleKey(lambda, id))
		}
	}
	var due []task.Schedule
	err = st.batchGetOne(ctx, "schedules of "+lambda, keys, func(item map[string]types.AttributeValue) error {
		sc, err := unmarshalSchedule(item)
		if err != nil {
			return err
		}
		if sc.State == task.ScheduleActive && !sc.NextFire.After(before) {
			due = append(due, sc)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(due, func(a, b task.Schedule) int {
		return cmp.Or(a.NextFire.Compare(b.NextFire), cmp.Compare(a.ID, b.ID))
	})
	return due, nil
}
