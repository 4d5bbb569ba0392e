package dynamostore

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// FailedShards is how many partitions of the failed index each failed status is spread over,
// whatever the lambda: one partition takes about 1,000 index writes a second, so 10 take the
// design's 10,000 tasks a second all failing at once (a bad deploy) without throttling the table.
// A page of ListFailed queries each of them. It is fixed: a store that read fewer partitions
// than another wrote would miss tasks.
const FailedShards = 10

// failedPK is the failed index's partition of a task that failed for good in status s.
func failedPK(s task.Status, lambda, id string) string {
	return failedPartition(s, shardOf(lambda+"#"+id, FailedShards))
}

func failedPartition(s task.Status, shard int) string {
	return "failed#" + string(s) + "#" + strconv.Itoa(shard)
}

// failedSK orders a failed partition by update time, then lambda, then id: its entries are
// read newest first. '#' sorts below every character of a lambda name, so the order of the
// strings is that of (time, lambda, id).
func failedSK(t task.Task) string { return stamp(t.UpdatedAt) + "#" + t.Lambda + "#" + t.ID }

// parseFailedSK reads the lambda and id of a failed sort key; false if it is not one.
func parseFailedSK(sk string) (lambda, id string, ok bool) {
	parts := strings.Split(sk, "#")
	if len(parts) != 3 || len(parts[0]) != 19 || task.ValidateName("lambda", parts[1]) != nil || task.ValidateID("id", parts[2]) != nil {
		return "", "", false
	}
	if _, err := strconv.ParseInt(parts[0], 10, 64); err != nil {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// ListFailed returns a page of the tasks of every lambda that failed for good, latest updated
// first (task.RedriveStore). The failed index holds an entry for each such task only (sparse: a
// task that never fails for good pays no write for it), in partitions by status and shard, each
// in the page's order. A page reads each partition of the statuses asked for down from the
// cursor, at most one entry more than the page from each, and keeps the first of their merge:
// every partition has read at least as many entries as the page holds, so none of the page's is
// missed. It then reads the page's task items, strongly, and leaves out those the index, being
// eventually consistent, still listed after they were redriven or moved. A page costs
// FailedShards queries per status, each of at most limit+1 small entries, and the page's items:
// never more, whatever the number of lambdas or of tasks, failed or not (docs/capacity.md).
func (st *Store) ListFailed(ctx context.Context, p task.FailedParams) ([]task.Task, string, error) {
	if err := p.Validate(); err != nil {
		return nil, "", err
	}
	limit := p.PageSize()
	below := ""
	if p.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		if _, _, ok := parseFailedSK(string(b)); err != nil || !ok {
			return nil, "", task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(p.Cursor))
		}
		below = string(b)
	}
	set := p.StatusSet()
	var mu sync.Mutex
	var found []string // sort keys
	err := parallel(len(set)*FailedShards, func(i int) error {
		keys, err := st.scanFailed(ctx, failedPartition(set[i/FailedShards], i%FailedShards), below, limit+1)
		mu.Lock()
		found = append(found, keys...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, "", err
	}
	slices.Sort(found)
	slices.Reverse(found)
	next := ""
	if len(found) > limit {
		found = found[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(found[limit-1]))
	}
	page, err := st.readFailed(ctx, found, set)
	return page, next, err
}

// scanFailed reads one partition of the failed index from below the sort key below (from its
// top if empty), newest first, and returns the sort keys of at most want entries.
func (st *Store) scanFailed(ctx context.Context, pk, below string, want int) ([]string, error) {
	in := &dynamodb.QueryInput{
		TableName: &st.cfg.Table, IndexName: aws.String(FailedIndex),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrFailedPK, "#sk": attrFailedSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk)},
		ProjectionExpression:      aws.String("#sk"),
		ScanIndexForward:          aws.Bool(false),
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	if below != "" {
		in.KeyConditionExpression = aws.String("#pk = :pk AND #sk < :below")
		in.ExpressionAttributeValues[":below"] = s(below)
	}
	var keys []string
	for {
		in.Limit = aws.Int32(int32(min(want-len(keys), 1000)))
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return keys, st.translate(err, "query index %s", FailedIndex)
		}
		for _, item := range out.Items {
			if sk := str(item, attrFailedSK); sk != "" {
				keys = append(keys, sk)
			}
		}
		if len(keys) >= want || out.LastEvaluatedKey == nil {
			return keys, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// readFailed reads the task items of the failed index's keys, in order, with their payloads,
// and keeps those still in one of the statuses of set.
func (st *Store) readFailed(ctx context.Context, keys []string, set []task.Status) ([]task.Task, error) {
	// A task may have two entries for a while (the index lags a move), and a read takes a key once.
	byLambda := map[string][]string{}
	var lambdas []string
	for _, sk := range keys {
		lambda, id, _ := parseFailedSK(sk)
		if _, ok := byLambda[lambda]; !ok {
			lambdas = append(lambdas, lambda)
		}
		if !slices.Contains(byLambda[lambda], id) {
			byLambda[lambda] = append(byLambda[lambda], id)
		}
	}
	read := make(map[string]task.Task, len(keys)) // by lambda#id
	for _, lambda := range lambdas {
		found, refs, err := st.getStates(ctx, lambda, byLambda[lambda])
		if err != nil {
			return nil, err
		}
		tasks := make([]task.Task, 0, len(found))
		for _, t := range found {
			tasks = append(tasks, t)
		}
		if err := st.fillPayloads(ctx, lambda, tasks, refs); err != nil {
			return nil, err
		}
		for _, t := range tasks {
			read[lambda+"#"+t.ID] = t
		}
	}
	page := make([]task.Task, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, sk := range keys {
		lambda, id, _ := parseFailedSK(sk)
		key := lambda + "#" + id
		if t, ok := read[key]; ok && !seen[key] && slices.Contains(set, t.Status) {
			seen[key] = true
			page = append(page, t)
		}
	}
	return page, nil
}
