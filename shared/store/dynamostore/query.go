package dynamostore

import (
	"cmp"
	"context"
	"encoding/base64"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// entry is one index hit: where the task sits in the index, and the attributes the index projects.
type entry struct {
	sk     string
	nanos  int64
	id     string
	status task.Status
	coll   string
	prio   string
}

func entryOf(item map[string]types.AttributeValue, skAttr string) (entry, bool) {
	e := entry{sk: str(item, skAttr), status: task.Status(str(item, attrStatus)), coll: str(item, attrCollection), prio: str(item, attrPriority)}
	var ok bool
	e.nanos, e.id, ok = parseStamp(e.sk)
	return e, ok
}

func byPosition(a, b entry) int {
	return cmp.Or(cmp.Compare(a.nanos, b.nanos), cmp.Compare(a.id, b.id))
}

// keyRange is a span of sort keys in one index partition. Ordered ranges hold entries in time
// order, so a query may stop once it has enough.
type keyRange struct {
	lo, hi  string
	ordered bool
}

// scan queries one partition of an index over a sort key range and returns the entries that keep
// accepts, at most want of them from an ordered range (want 0 means all).
func (st *Store) scan(ctx context.Context, index, pkAttr, skAttr, pk string, r keyRange, want int, keep func(entry) bool) ([]entry, error) {
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, IndexName: aws.String(index),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames:  map[string]string{"#pk": pkAttr, "#sk": skAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk), ":lo": s(r.lo), ":hi": s(r.hi)},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	var found []entry
	for {
		if r.ordered && want > 0 {
			// Read little more than what is still wanted: an index read costs by the byte.
			in.Limit = aws.Int32(int32(min(max(want-len(found), 16), 1000)))
		}
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, st.translate(err, "query index %s", index)
		}
		for _, item := range out.Items {
			if e, ok := entryOf(item, skAttr); ok && keep(e) {
				found = append(found, e)
				if r.ordered && want > 0 && len(found) == want {
					return found, nil
				}
			}
		}
		if out.LastEvaluatedKey == nil {
			return found, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// scanShards runs scan on every shard of a lambda over every range and merges the entries in
// index order. A task met twice (it moved between two queries) counts once, where first met.
func (st *Store) scanShards(ctx context.Context, lambda, index, pkAttr, skAttr string, pkOf func(int) string, ranges []keyRange, want int, keep func(entry) bool) ([]entry, error) {
	var mu sync.Mutex
	var all []entry
	err := parallel(st.shards(lambda), func(shard int) error {
		for _, r := range ranges {
			found, err := st.scan(ctx, index, pkAttr, skAttr, pkOf(shard), r, want, keep)
			if err != nil {
				return err
			}
			mu.Lock()
			all = append(all, found...)
			mu.Unlock()
		}
		return nil
	})
	slices.SortFunc(all, byPosition)
	seen := make(map[string]bool, len(all))
	return slices.DeleteFunc(all, func(e entry) bool {
		dup := seen[e.id]
		seen[e.id] = true
		return dup
	}), err
}

// Due returns due tasks of one lambda, earliest first. It queries the due index on every shard,
// then reads the tasks themselves and keeps those that are still due: the index is eventually
// consistent, and a hit may be stale.
//
// A waiting task's entry is keyed by priority, so a query for one priority reads only what it
// returns. A query for waiting tasks of every priority reads all of the lambda's waiting entries;
// the consumer never makes one. Enqueued tasks, whose trigger is their enqueue timeout, are a
// lane of their own, in trigger order whatever their priority (a query of one priority filters
// it). Parked tasks are a lane of their own, keyed by collection (see scanParked).
func (st *Store) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if task.ValidateName("lambda name", p.Lambda) != nil || (p.Collection != "" && task.ValidateID("collection", p.Collection) != nil) {
		return nil, nil
	}
	wanted := func(s task.Status) bool { return len(p.Statuses) == 0 || slices.Contains(p.Statuses, s) }
	limit := max(p.Limit, 0)
	keep := func(e entry) bool {
		return wanted(e.status) && (p.Priority == "" || e.prio == p.Priority) && (p.Collection == "" || e.coll == p.Collection) &&
			!slices.Contains(p.SkipCollections, e.coll) && e.nanos <= p.Before.UnixNano()
	}
	var entries []entry
	var err error
	if p.Parked {
		entries, err = st.dueParked(ctx, p, limit, keep)
	} else {
		entries, err = st.scanShards(ctx, p.Lambda, DueIndex, attrDuePK, attrDueSK, func(i int) string { return duePK(p.Lambda, i) }, dueRanges(p, wanted), limit, keep)
	}
	if err != nil {
		return nil, err
	}
	stillDue := func(t task.Task) bool {
		return t.NextTriggerAt != nil && !t.NextTriggerAt.After(p.Before) && wanted(t.Status) && t.Parked == p.Parked &&
			(p.Priority == "" || t.Priority == p.Priority) && (p.Collection == "" || t.Collection == p.Collection) &&
			!slices.Contains(p.SkipCollections, t.Collection)
	}
	tasks, _, _, err := st.confirm(ctx, p.Lambda, entries, limit, 0, stillDue)
	return tasks, err
}

// Triggered reads one entry of the lambda's due index on every shard, whatever its lane: a task
// has a due entry exactly while it has a next trigger. An idle lambda costs S queries of ½ RRU,
// where a sweep's lanes cost 4 + P queries per shard.
func (st *Store) Triggered(ctx context.Context, lambda string) (bool, error) {
	if task.ValidateName("lambda name", lambda) != nil {
		return false, nil
	}
	var found atomic.Bool
	err := parallel(st.shards(lambda), func(shard int) error {
		out, err := st.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &st.cfg.Table, IndexName: aws.String(DueIndex),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrDuePK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(duePK(lambda, shard))},
			Limit:                     aws.Int32(1),
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		})
		if err != nil {
			return st.translate(err, "query index %s", DueIndex)
		}
		if len(out.Items) > 0 {
			found.Store(true)
		}
		return nil
	})
	return found.Load(), err
}

// dueRanges are the key ranges of the lanes that hold the tasks p asks for, parked ones aside.
func dueRanges(p task.DueParams, wanted func(task.Status) bool) []keyRange {
	before := stamp(p.Before)
	var ranges []keyRange
	if slices.ContainsFunc(task.Statuses, func(s task.Status) bool { return wanted(s) && laneOf(s) == laneWait }) {
		if p.Priority != "" {
			prefix := laneWait + "#" + p.Priority + "#"
			ranges = append(ranges, keyRange{lo: prefix, hi: prefix + before + "$", ordered: true})
		} else {
			ranges = append(ranges, keyRange{lo: laneWait + "#", hi: laneWait + "$"})
		}
	}
	// The other lanes are in trigger order, whatever the priority (a query of one priority
	// filters them).
	for _, lane := range []string{laneResend, laneRun, laneFlow} {
		if slices.ContainsFunc(task.Statuses, func(s task.Status) bool { return wanted(s) && laneOf(s) == lane }) {
			ranges = append(ranges, keyRange{lo: lane + "#", hi: lane + "#" + before + "$", ordered: true})
		}
	}
	return ranges
}

// laneOf is the due lane of a task in status s that is not parked (see dueSK).
func laneOf(s task.Status) string {
	switch {
	case isRunning(s):
		return laneRun
	case s.Terminal():
		return laneNotify
	case s == task.StatusEnqueued:
		return laneResend
	case s == task.StatusPending:
		return lanePending
	}
	return laneWait
}

// dueParked reads the parked lane of every shard: one collection's key range, or every
// collection but those in p.SkipCollections.
func (st *Store) dueParked(ctx context.Context, p task.DueParams, limit int, keep func(entry) bool) ([]entry, error) {
	pkOf := func(i int) string { return duePK(p.Lambda, i) }
	if p.Collection != "" {
		prefix := laneParked + "#" + p.Collection + "#"
		r := keyRange{lo: prefix, hi: prefix + stamp(p.Before) + "$", ordered: true}
		return st.scanShards(ctx, p.Lambda, DueIndex, attrDuePK, attrDueSK, pkOf, []keyRange{r}, limit, keep)
	}
	var mu sync.Mutex
	var all []entry
	err := parallel(st.shards(p.Lambda), func(shard int) error {
		found, err := st.scanParked(ctx, pkOf(shard), p.SkipCollections, p.Before.UnixNano(), limit, keep)
		mu.Lock()
		all = append(all, found...)
		mu.Unlock()
		return err
	})
	slices.SortFunc(all, byPosition)
	return all, err
}

// scanParked reads one shard's parked lane, whose entries sort by collection, then trigger. It
// jumps over a collection in skip (its gate still holds it), and over the rest of a collection
// once past before, with a query that starts after that collection and reads one entry: a held
// backlog costs one entry per collection, never its size.
func (st *Store) scanParked(ctx context.Context, pk string, skip []string, before int64, want int, keep func(entry) bool) ([]entry, error) {
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, IndexName: aws.String(DueIndex),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrDuePK, "#sk": attrDueSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk), ":lo": s(laneParked + "#"), ":hi": s(laneParked + "$")},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	var found []entry
	probe := true // read one entry to learn what comes next: a held collection costs no more
	for {
		page := 1000
		if want > 0 {
			page = min(want-len(found), 1000)
		}
		if probe {
			page = 1
		}
		in.Limit = aws.Int32(int32(page))
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return found, st.translate(err, "query index %s", DueIndex)
		}
		jump := ""
		for _, item := range out.Items {
			e, ok := entryOf(item, attrDueSK)
			if !ok {
				continue
			}
			if slices.Contains(skip, e.coll) || e.nanos > before {
				jump = laneParked + "#" + e.coll + "$" // after every key of the collection
				break
			}
			if keep(e) {
				if found = append(found, e); want > 0 && len(found) == want {
					return found, nil
				}
			}
		}
		switch {
		case jump != "":
			in.ExclusiveStartKey, probe = nil, true
			in.ExpressionAttributeValues[":lo"] = s(jump)
		case out.LastEvaluatedKey == nil:
			return found, nil
		default:
			in.ExclusiveStartKey, probe = out.LastEvaluatedKey, false
		}
	}
}

// confirm reads the task items of index entries, in order, and keeps the tasks that ok accepts,
// until it has want of them (0: no limit) or has read the items of most entries (0: all). An
// entry the table contradicts (a stale index hit) gives its place to the next. It returns the
// tasks without the payloads kept in items of their own (refs names those, by id; fillPayloads
// reads them), and how many entries it read.
func (st *Store) confirm(ctx context.Context, lambda string, entries []entry, want, most int, ok func(task.Task) bool) (tasks []task.Task, refs map[string]string, read int, err error) {
	refs = map[string]string{}
	for last := 0; read < len(entries) && (want == 0 || len(tasks) < want) && (most == 0 || read < most); {
		n := len(entries) - read
		switch {
		case want > 0 && most > 0:
			// A filter on the items (a status) may match few: each batch after the first reads
			// twice as many as the last, so a sparse match takes few calls and a dense one reads
			// at most twice the items it needs.
			n = min(n, max(want-len(tasks), 2*last))
		case want > 0:
			n = min(n, want-len(tasks))
		}
		if most > 0 {
			n = min(n, most-read)
		}
		batch := entries[read : read+n]
		read, last = read+n, n
		got, batchRefs, err := st.getStates(ctx, lambda, idsOf(batch))
		if err != nil {
			return nil, nil, read, err
		}
		for _, e := range batch {
			if t, found := got[e.id]; found && ok(t) { // TTL may have removed it meanwhile
				tasks = append(tasks, t)
				if ref := batchRefs[e.id]; ref != "" {
					refs[e.id] = ref
				}
			}
		}
	}
	return tasks, refs, read, nil
}

func idsOf(entries []entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.id
	}
	return ids
}

// List returns a page of one lambda's tasks in creation order. Each shard of the list index is
// in creation order, so a page is the merge of the shards' first entries after the cursor.
//
// Each shard reads at most p.ReadBudget() entries, and stops once it has one match more than the
// page. The merge keeps only the matches up to the frontier: the smallest last key read by a
// shard that may hold more. Every shard has read everything up to it, so the page misses no task
// before it. The cursor is the last task returned when the page is full, and the frontier
// otherwise: a page with a sparse filter may hold few tasks, or none, and a cursor to go on.
//
// The index projects the collection, which never changes, but not the status, which nearly
// every transition changes: it is written once per task, by Create. A status filter is therefore
// checked on the task items (listByStatus).
func (st *Store) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	limit := p.PageSize()
	lo := "0" // below every key: they start with digits
	if p.Cursor != "" {
		after, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		lo = after + "\x00" // the smallest key after the cursor's
	}
	if task.ValidateName("lambda name", p.Lambda) != nil {
		return nil, "", nil
	}
	// A range of creation times is a range of keys: "stamp" sorts before "stamp#id".
	hi := ""
	if !p.CreatedFrom.IsZero() {
		lo = max(lo, stamp(p.CreatedFrom))
	}
	if !p.CreatedTo.IsZero() {
		if hi = stamp(p.CreatedTo); lo > hi {
			return nil, "", nil
		}
	}
	keep := func(e entry) bool { return p.Collection == "" || e.coll == p.Collection }
	// One match more than the page tells whether another page follows. With a status filter
	// every entry of the collection is a candidate, and which are read is decided after the merge.
	want := limit + 1
	byStatus := len(p.StatusSet()) > 0
	if byStatus {
		want = p.ReadBudget()
	}
	reads := make([]shardRead, st.shards(p.Lambda))
	err := parallel(len(reads), func(shard int) (err error) {
		reads[shard], err = st.scanList(ctx, listPK(p.Lambda, shard), lo, hi, want, p.ReadBudget(), keep)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	frontier := ""
	for _, r := range reads {
		if !r.done && (frontier == "" || r.last < frontier) {
			frontier = r.last
		}
	}
	var entries []entry
	for _, r := range reads {
		for _, e := range r.found {
			if frontier == "" || e.sk <= frontier {
				entries = append(entries, e)
			}
		}
	}
	slices.SortFunc(entries, byPosition)
	var page []task.Task
	var refs map[string]string
	next := frontier
	if byStatus {
		page, refs, next, err = st.listByStatus(ctx, p, entries, frontier)
	} else {
		if len(entries) > limit {
			entries = entries[:limit]
			next = entries[limit-1].sk
		}
		// The index may lag: a task TTL removed meanwhile is left out.
		page, refs, _, err = st.confirm(ctx, p.Lambda, entries, 0, 0, func(t task.Task) bool {
			return p.Collection == "" || t.Collection == p.Collection
		})
	}
	if err != nil {
		return nil, "", err
	}
	if err := st.fillPayloads(ctx, p.Lambda, page, refs); err != nil {
		return nil, "", err
	}
	if next != "" {
		next = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return page, next, nil
}

// listByStatus reads the task items of the candidates (the entries of the collection asked for,
// up to the frontier, in order) and keeps those in p.Status, until it has one more than the page
// or has read p.ReadBudget() items. It returns the page and its cursor: after the last task of a
// full page, else after the last candidate read, else the frontier.
//
// The reads are strongly consistent, as a Get: the status is the one of the last transition,
// where the index it used to be read from lagged, and the items read are the page, not read
// again. A page costs at most the budget in task items, 1 RRU each under 4 KB, beside its index
// queries (docs/capacity.md, "Filtered lists").
func (st *Store) listByStatus(ctx context.Context, p task.ListParams, candidates []entry, frontier string) ([]task.Task, map[string]string, string, error) {
	limit := p.PageSize()
	page, refs, read, err := st.confirm(ctx, p.Lambda, candidates, limit+1, p.ReadBudget(), func(t task.Task) bool {
		return p.Matches(t)
	})
	if err != nil {
		return nil, nil, "", err
	}
	next := frontier
	if read < len(candidates) {
		next = candidates[read-1].sk
	}
	if len(page) > limit {
		page = page[:limit]
		last := slices.IndexFunc(candidates, func(e entry) bool { return e.id == page[limit-1].ID })
		next = candidates[last].sk
	}
	return page, refs, next, nil
}

// shardRead is what a list query read of one shard: the entries that matched, the last key it
// read, and whether it read to the end of the shard.
type shardRead struct {
	found []entry
	last  string
	done  bool
}

// scanList reads one shard of the list index from lo (up to hi, if set), in order, until it has
// want matches, has read budget entries, or reaches the end.
func (st *Store) scanList(ctx context.Context, pk, lo, hi string, want, budget int, keep func(entry) bool) (shardRead, error) {
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, IndexName: aws.String(ListIndex),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk >= :lo"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrListPK, "#sk": attrListSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk), ":lo": s(lo)},
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	if hi != "" {
		in.KeyConditionExpression = aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi")
		in.ExpressionAttributeValues[":hi"] = s(hi)
	}
	var r shardRead
	for read, limit, sparse := 0, 0, false; ; {
		// Read little more than what is still wanted (an index read costs by the byte), and
		// never past the budget. Where the filter skipped entries, read twice as many as the
		// last query: each query costs ½ RRU at least, which a few entries never use up.
		next := max(want-len(r.found), 16)
		if sparse {
			next = max(next, 2*limit)
		}
		limit = min(next, 1000, budget-read)
		in.Limit = aws.Int32(int32(limit))
		before := len(r.found)
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return r, st.translate(err, "query index %s", ListIndex)
		}
		for _, item := range out.Items {
			read++
			r.last = str(item, attrListSK)
			if e, ok := entryOf(item, attrListSK); ok && keep(e) {
				if r.found = append(r.found, e); len(r.found) == want {
					return r, nil
				}
			}
		}
		if out.LastEvaluatedKey == nil {
			r.done = true
			return r, nil
		}
		if read >= budget {
			return r, nil
		}
		sparse = len(r.found)-before < len(out.Items)
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if _, id, ok := parseStamp(string(b)); ok && task.ValidateID("id", id) == nil {
			return string(b), nil
		}
	}
	return "", task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(c))
}
