package dynamostore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// The limits of starts (task.Limits) are kept in one record per limit and scope: pk
// limit#<lambda>#<limit>, and #<key> after it for a key's, sk "limit". A concurrency cap's record
// holds its holders (attrHolders: task id -> the lease it started under), never more than the
// cap: a holder whose task no longer runs under that lease is stale, and a start takes its place,
// so no task's end writes the record. A rate's record holds when the next start is due
// (attrNextStart). A limited start writes them and the task in one transaction (start), and so
// does a start held by a rate that books its slot (the task's attrRateSlot).
const (
	limitSK       = "limit"
	attrHolders   = "h"  // M of S, on a concurrency cap's record
	attrNextStart = "nx" // N, unix nanoseconds, on a rate's record
)

func limitPK(lambda string, l task.Limit) string {
	pk := "limit#" + lambda + "#" + l.Name
	if l.Key != "" {
		pk += "#" + l.Key
	}
	return pk
}

func limitKey(lambda string, l task.Limit) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(limitPK(lambda, l)), attrSK: s(limitSK)}
}

const (
	// startTries bounds how often a start reads its limits again after racing starts changed
	// them first.
	startTries = 8
	// maxStaleChecks bounds the stale holders one transaction checks, within TransactWriteItems'
	// 100 items.
	maxStaleChecks = 90
	// rateRecordTTL is how long after its next start is due a rate's record expires.
	rateRecordTTL = time.Hour
)

// start writes t, a claim's start under its limits, if its version is still prev: in one
// transaction with its place under each concurrency cap and the next start of each rate, read
// strongly just before. A limit that holds it back is a *task.Held, and nothing is written but a
// rate's booking (task.RateHold): the slot on the task, its version moved on, and the rates'
// next starts after it, in one transaction. A start on its booking (task.BookingAt) takes no
// rate's turn. A version moved on is task.ErrConflict, which wins over a limit. A start or a
// booking that a racing one beat to a place or a turn reads the limits again.
func (st *Store) start(ctx context.Context, t task.Task, prev int64) error {
	if validKey(t.Lambda, t.ID) != nil {
		return st.changed(t, prev, nil)
	}
	for try := 0; ; try++ {
		plan, err := st.planStart(ctx, t, prev)
		if err != nil {
			return err
		}
		if len(plan.items) == 1 && !plan.drain && plan.held == nil {
			// A start on its booking under no cap: the task's write alone, as an unlimited one.
			_, err := st.update(ctx, t, prev, nil)
			return err
		}
		// The SDK fills in ClientRequestToken once per call, so its own retries cannot apply the
		// transaction twice.
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: plan.items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		if err == nil && plan.drain {
			continue // the record is back within its cap: plan the start itself
		}
		if err == nil && plan.held != nil {
			return plan.held // booked
		}
		if err == nil {
			st.countMove(ctx, t, plan.from)
			return nil
		}
		var cancelled *types.TransactionCanceledException
		if !errors.As(err, &cancelled) {
			return st.translate(err, "start %s/%s", t.Lambda, t.ID)
		}
		reasons := cancelled.CancellationReasons
		// A drain's first item is a cap's record, not the task: its failure is a race, below.
		if !plan.drain && len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
			return st.changed(t, prev, reasons[0].Item)
		}
		if !slices.ContainsFunc(reasons, func(r types.CancellationReason) bool {
			c := aws.ToString(r.Code)
			return c == "ConditionalCheckFailed" || c == "TransactionConflict"
		}) {
			return st.translate(err, "start %s/%s", t.Lambda, t.ID)
		}
		if plan.held != nil {
			// A booking that another start or booking beat to the record: held, unbooked, until
			// the slot it tried for, when it books again. Not read again here: racing bookings
			// of a backlog would each take up to startTries rounds.
			return plan.held
		}
		if try+1 == startTries {
			// Not a conflict, which a worker takes for a duplicate and drops: the task is still
			// to start, and its message must come back soon.
			return task.Errorf(task.ErrThrottled, "start of task %q of lambda %s: racing starts changed its limits %d times; retry later", t.ID, t.Lambda, startTries)
		}
		// Spread by the task: racing starts of other tasks that all lost to a conflict must not
		// meet again.
		spread := 0.5 + float64(shardOf(t.ID+"#"+strconv.Itoa(try), 1000))/1000
		if err := sleep(ctx, time.Duration(float64(backoff(try))*spread)); err != nil {
			return err
		}
	}
}

// startPlan is the transaction of a start: the task's write first, then each limit's. A drain
// writes no task: it only removes stale holders from a cap's record that is over its cap by more
// than one transaction can check (a cap lowered by that much), before the start. A booking
// (held set) writes the slot on the task and the rates' next starts, and answers held.
type startPlan struct {
	items []types.TransactWriteItem
	from  task.Status // the status the task leaves, for its counter
	drain bool
	held  *task.Held
}

// planStart reads the task's version and t's limits, strongly, and returns the transaction that
// starts t, or the error that stops it: task.ErrConflict, or a *task.Held.
func (st *Store) planStart(ctx context.Context, t task.Task, prev int64) (startPlan, error) {
	limits := t.Limits.Of(t)
	keys := []map[string]types.AttributeValue{taskKey(t.Lambda, t.ID)}
	for _, l := range limits {
		keys = append(keys, limitKey(t.Lambda, l))
	}
	// GetItem, not BatchGetItem: a status role may read its lambda's items only so (infra/stack).
	items := make([]map[string]types.AttributeValue, len(keys))
	err := parallel(len(keys), func(i int) error {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &st.cfg.Table, Key: keys[i], ConsistentRead: aws.Bool(true),
			ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		if err != nil {
			return st.translate(err, "start %s/%s: read its limits", t.Lambda, t.ID)
		}
		items[i] = out.Item
		return nil
	})
	if err != nil {
		return startPlan{}, err
	}
	cur := items[0]
	records := map[string]map[string]types.AttributeValue{}
	for i, l := range limits {
		records[limitPK(t.Lambda, l)] = items[i+1]
	}
	if cur == nil || str(cur, attrStatus) == "" {
		return startPlan{}, st.changed(t, prev, nil) // gone, or a tombstone
	}
	if attrInt(cur, attrVersion) != int(prev) {
		return startPlan{}, st.changed(t, prev, cur)
	}
	write := st.updateOf(t, prev, nil, nil, "")
	write.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	plan := startPlan{items: []types.TransactWriteItem{{Update: write}}, from: task.Status(str(cur, attrStatus))}
	now := t.StartTime()
	booked := nanosAttr(cur, attrRateSlot)
	var rates []task.Limit
	for _, l := range limits {
		if l.Cap == 0 {
			rates = append(rates, l)
		}
	}
	if len(rates) > 0 && task.BookingAt(&booked, now) == task.BookedLater {
		// Before the caps: a task booked ahead waits for its slot, not for a cap's place.
		return startPlan{}, &task.Held{Limit: task.RateName(rates), Until: booked}
	}
	stale := map[string][]string{} // holders whose places the start takes: task id -> leases
	for _, l := range limits {
		rec := records[limitPK(t.Lambda, l)]
		if l.Cap == 0 {
			continue
		}
		u, drain, err := st.takePlace(ctx, t, l, rec, stale)
		if err != nil {
			return startPlan{}, err // a cap books nothing
		}
		if drain {
			plan = startPlan{items: []types.TransactWriteItem{{Update: u}}, drain: true}
			stale = drainOnly(stale, u)
			break
		}
		plan.items = append(plan.items, types.TransactWriteItem{Update: u})
	}
	if len(rates) > 0 && !plan.drain {
		switch task.BookingAt(&booked, now) {
		case task.BookedNow:
			// Its turn was taken when it booked.
		default:
			next := make([]time.Time, len(rates))
			for i, l := range rates {
				next[i] = nanosAttr(records[limitPK(t.Lambda, l)], attrNextStart)
			}
			held, book := task.RateHold(rates, next, now)
			if held != nil && !book {
				return startPlan{}, held
			}
			if held != nil {
				return st.bookPlan(t, prev, rates, next, held), nil
			}
			for i, l := range rates {
				plan.items = append(plan.items, st.nextStart(t.Lambda, l, next[i], now, now.Add(l.Rate.Interval())))
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(stale)) {
		plan.items = append(plan.items, types.TransactWriteItem{ConditionCheck: st.notRunning(t.Lambda, id, stale[id])})
	}
	return plan, nil
}

// bookPlan is the transaction that books held.Until for t, held by rates whose next starts were
// read as next (task.RateHold): the slot on the task item, if its version is still prev, moving
// it on, and each rate's next start after the slot, if no start or booking moved it since.
func (st *Store) bookPlan(t task.Task, prev int64, rates []task.Limit, next []time.Time, held *task.Held) startPlan {
	plan := startPlan{held: held, items: []types.TransactWriteItem{{Update: &types.Update{
		TableName: &st.cfg.Table, Key: taskKey(t.Lambda, t.ID),
		UpdateExpression:         aws.String("SET #rs = :slot, #v = :next"),
		ConditionExpression:      aws.String("#v = :prev"),
		ExpressionAttributeNames: map[string]string{"#rs": attrRateSlot, "#v": attrVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":slot": n(held.Until.UnixNano()), ":next": n(prev + 1), ":prev": n(prev),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}}
	for i, l := range rates {
		plan.items = append(plan.items, st.nextStart(t.Lambda, l, next[i], time.Time{}, held.Until.Add(l.Rate.Interval())))
	}
	return plan
}

// nextStart is the write that sets the next start of rate l of lambda to to, if it is still as
// read (read, zero if none), or, if due is set, is due by then.
func (st *Store) nextStart(lambda string, l task.Limit, read, due, to time.Time) types.TransactWriteItem {
	values := map[string]types.AttributeValue{
		":next": n(to.UnixNano()),
		// Once its next start is due, a rate's record says nothing an absent one does not.
		":e": n(to.Add(rateRecordTTL).Unix()),
	}
	cond := "attribute_not_exists(#n)"
	switch {
	case !due.IsZero():
		cond += " OR #n <= :due"
		values[":due"] = n(due.UnixNano())
	case !read.IsZero():
		cond = "#n = :read"
		values[":read"] = n(read.UnixNano())
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &st.cfg.Table, Key: limitKey(lambda, l),
		UpdateExpression:          aws.String("SET #n = :next, #e = :e"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#n": attrNextStart, "#e": attrExpires},
		ExpressionAttributeValues: values,
	}}
}

// drainOnly keeps of stale the holders that the drain u removes.
func drainOnly(stale map[string][]string, u *types.Update) map[string][]string {
	kept := map[string][]string{}
	for ph, id := range u.ExpressionAttributeNames {
		if strings.HasPrefix(ph, "#d") {
			kept[id] = stale[id]
		}
	}
	return kept
}

// takePlace is the write of rec, the record of cap l, that gives t a place: a free one, t's own
// of an earlier attempt, or those of stale holders, which it adds to stale for their checks.
// It keeps the record within the cap (and brings it back within a cap lowered since). If every
// place is held by a task that still runs under its lease, it returns a *task.Held. If more
// stale holders must go than one transaction can check, it is a drain: it removes as many as it
// can and gives t no place.
func (st *Store) takePlace(ctx context.Context, t task.Task, l task.Limit, rec map[string]types.AttributeValue, stale map[string][]string) (u *types.Update, drain bool, err error) {
	u = &types.Update{
		TableName: &st.cfg.Table, Key: limitKey(t.Lambda, l),
		ExpressionAttributeNames:  map[string]string{"#h": attrHolders, "#me": t.ID},
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(t.Lease)},
	}
	m, ok := rec[attrHolders].(*types.AttributeValueMemberM)
	if !ok {
		u.UpdateExpression = aws.String("SET #h = :h")
		u.ConditionExpression = aws.String("attribute_not_exists(#h)")
		// A placeholder the expressions do not use fails the call.
		u.ExpressionAttributeNames = map[string]string{"#h": attrHolders}
		u.ExpressionAttributeValues = map[string]types.AttributeValue{":h": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{t.ID: s(t.Lease)}}}
		return u, false, nil
	}
	holders := make(map[string]string, len(m.Value))
	for id, v := range m.Value {
		if lease, ok := v.(*types.AttributeValueMemberS); ok {
			holders[id] = lease.Value
		}
	}
	own, mine := holders[t.ID]
	delete(holders, t.ID)
	var drop []string
	if need := len(holders) + 1 - l.Cap; need > 0 {
		live, dead, err := st.stillRunning(ctx, t.Lambda, holders)
		if err != nil {
			return nil, false, err
		}
		if live >= l.Cap {
			return nil, false, &task.Held{Limit: l.Name}
		}
		drop = dead[:need]
		if len(drop) > maxStaleChecks-len(stale) {
			// A drain checks this record's holders alone.
			drop, drain = drop[:min(len(drop), maxStaleChecks)], true
		}
	}
	set := "SET #h.#me = :me"
	cond := []string{"attribute_not_exists(#h.#me)"}
	added := 1
	if mine {
		cond[0] = "#h.#me = :own"
		u.ExpressionAttributeValues[":own"] = s(own)
		added = 0
	}
	var remove []string
	for i, id := range drop {
		d := strconv.Itoa(i)
		u.ExpressionAttributeNames["#d"+d] = id
		u.ExpressionAttributeValues[":d"+d] = s(holders[id])
		remove = append(remove, "#h.#d"+d)
		cond = append(cond, "#h.#d"+d+" = :d"+d)
		if !slices.Contains(stale[id], holders[id]) {
			stale[id] = append(stale[id], holders[id])
		}
	}
	if drain {
		delete(u.ExpressionAttributeNames, "#me")
		delete(u.ExpressionAttributeValues, ":me")
		delete(u.ExpressionAttributeValues, ":own")
		u.UpdateExpression = aws.String("REMOVE " + strings.Join(remove, ", "))
		u.ConditionExpression = aws.String(strings.Join(cond[1:], " AND "))
		return u, true, nil
	}
	// After the write the record holds at most the cap: at the commit it holds at most this many.
	u.ExpressionAttributeValues[":max"] = n(int64(l.Cap + len(drop) - added))
	cond = append(cond, "size(#h) <= :max")
	expr := set
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	u.UpdateExpression, u.ConditionExpression = aws.String(expr), aws.String(strings.Join(cond, " AND "))
	return u, false, nil
}

// stillRunning reads the holders' tasks, strongly, and counts those that still run under the
// lease they hold their place for; it lists the others, stale, in id order.
func (st *Store) stillRunning(ctx context.Context, lambda string, holders map[string]string) (live int, stale []string, err error) {
	ids := slices.Sorted(maps.Keys(holders))
	running := map[string]bool{}
	// The state attributes that a status role may read of any task (infra/stack, upstream reads).
	names := map[string]string{"#i": attrID, "#s": attrStatus, "#l": attrLease}
	for chunk := range slices.Chunk(ids, 100) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, id := range chunk {
			keys[i] = taskKey(lambda, id)
		}
		ka := types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("#i, #s, #l"), ExpressionAttributeNames: names}
		err := st.batchGetProjected(ctx, "the holders of a limit of "+lambda, ka, func(item map[string]types.AttributeValue) error {
			id := str(item, attrID)
			running[id] = isRunning(task.Status(str(item, attrStatus))) && str(item, attrLease) == holders[id]
			return nil
		})
		if err != nil {
			return 0, nil, err
		}
	}
	for _, id := range ids {
		if running[id] {
			live++
		} else {
			stale = append(stale, id)
		}
	}
	return live, stale, nil
}

// notRunning checks that task id of lambda runs under none of leases: a stale holder's place is
// taken only if it still is, whatever happened since it was read.
func (st *Store) notRunning(lambda, id string, leases []string) *types.ConditionCheck {
	values := map[string]types.AttributeValue{}
	var rs, ls []string
	for i, status := range task.Running {
		v := ":r" + strconv.Itoa(i)
		values[v] = s(string(status))
		rs = append(rs, v)
	}
	for i, lease := range leases {
		v := ":l" + strconv.Itoa(i)
		values[v] = s(lease)
		ls = append(ls, v)
	}
	return &types.ConditionCheck{
		TableName: &st.cfg.Table, Key: taskKey(lambda, id),
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR NOT (#s IN (" + strings.Join(rs, ", ") + ")) OR NOT (#l IN (" + strings.Join(ls, ", ") + "))"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#s": attrStatus, "#l": attrLease},
		ExpressionAttributeValues: values,
	}
}
