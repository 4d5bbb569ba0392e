package dynamostore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// rawItems returns every item under a task's pk, by sort key, read strongly.
func rawItems(t *testing.T, db *dynamodb.Client, table, lambda, id string) map[string]map[string]types.AttributeValue {
	t.Helper()
	in := &dynamodb.QueryInput{
		TableName: &table, ConsistentRead: aws.Bool(true), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "task#" + lambda + "#" + id}},
	}
	bySK := map[string]map[string]types.AttributeValue{}
	for {
		out, err := db.Query(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range out.Items {
			bySK[item["sk"].(*types.AttributeValueMemberS).Value] = item
		}
		if out.LastEvaluatedKey == nil {
			return bySK
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// chunkItems returns the sort keys of a task's after-list chunk items, in order.
func chunkItems(items map[string]map[string]types.AttributeValue) []string {
	var sks []string
	for sk := range items {
		if strings.HasPrefix(sk, "after#") {
			sks = append(sks, sk)
		}
	}
	slices.Sort(sks)
	return sks
}

func refs(n int, lambdas ...string) []task.Ref {
	out := make([]task.Ref, n)
	for i := range out {
		out[i] = task.Ref{Lambda: lambdas[i%len(lambdas)], ID: fmt.Sprintf("up-%04d", i)}
	}
	return out
}

// pendingTask is a task of lambda l waiting for after, as task.New makes it.
func pendingTask(t *testing.T, l task.Lambda, id string, after []task.Ref, now time.Time) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id, After: after}, l, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// TestAfterChunks stores lists of 0, 1, 100, 101 and 250 upstreams: each takes ceil(n/100) chunk
// items of one list, reads back whole and in order, and reads in ranges across chunk boundaries.
// A task without upstreams has no chunk item and none of the flow attributes.
func TestAfterChunks(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "chunks"}.WithDefaults()
	now := time.Now().UTC()
	for _, n := range []int{0, 1, 100, 101, 250} {
		id := fmt.Sprintf("t%d", n)
		after := refs(n, l.Name, "other-lambda")
		tk := newTask(t, l, id, nil, now)
		if n > 0 {
			tk = pendingTask(t, l, id, after, now)
		}
		if err := s.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		items := rawItems(t, db, table, l.Name, id)
		if got, want := len(chunkItems(items)), (n+99)/100; got != want || len(items) != want+1 {
			t.Errorf("%d upstreams: %d chunk items of %d items, want %d and the task item", n, got, len(items), want)
		}
		if n == 0 {
			for _, a := range []string{"after_n", "aref", "trig", "settled", "down", "ncur"} {
				if _, ok := items["task"][a]; ok {
					t.Errorf("a task without upstreams has attribute %s", a)
				}
			}
		}
		got, err := s.Get(ctx, l.Name, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.AfterCount != n || !slices.Equal(got.After, after[:n]) {
			t.Errorf("%d upstreams: Get has AfterCount %d and %v", n, got.AfterCount, got.After)
		}
		state, err := s.GetState(ctx, l.Name, id)
		if err != nil || state.After != nil || state.AfterCount != n {
			t.Errorf("%d upstreams: GetState: After %v, AfterCount %d, %v; want no After and the count", n, state.After, state.AfterCount, err)
		}
		for _, r := range [][2]int{{0, 1}, {99, 2}, {100, 1}, {98, 5}, {0, 1000}, {150, 100}, {n, 5}, {n + 10, 5}} {
			from, limit := r[0], r[1]
			up, err := s.Upstreams(ctx, task.Ref{Lambda: l.Name, ID: id}, from, limit)
			if err != nil {
				t.Fatal(err)
			}
			want := after[min(from, n):min(from+limit, n)]
			if !slices.Equal(up, want) {
				t.Errorf("%d upstreams: Upstreams(%d, %d) = %d refs, want %d", n, from, limit, len(up), len(want))
			}
		}
	}
	if _, err := s.Upstreams(ctx, task.Ref{Lambda: l.Name, ID: "missing"}, 0, 10); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Upstreams of a missing task: %v, want ErrNotFound", err)
	}
}

// TestCreateLosesKeepsAfter: a Create that loses to an existing id with other upstreams leaves
// the winner's list as it was, and takes its own chunks away again.
func TestCreateLosesKeepsAfter(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "dup"}.WithDefaults()
	now := time.Now().UTC()
	winner := refs(150, l.Name)
	loser := refs(250, "another")
	if err := s.Create(ctx, pendingTask(t, l, "d", winner, now)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, pendingTask(t, l, "d", loser, now)); !errors.Is(err, task.ErrExists) {
		t.Fatalf("Create of a taken id: %v, want ErrExists", err)
	}
	loserBatch := []task.Task{pendingTask(t, l, "d2", loser, now), pendingTask(t, l, "d", loser, now)}
	if err := s.CreateBatch(ctx, loserBatch); !errors.Is(err, task.ErrExists) {
		t.Fatalf("CreateBatch with a taken id: %v, want ErrExists", err)
	}
	got, err := s.Get(ctx, l.Name, "d")
	if err != nil || !slices.Equal(got.After, winner) || got.AfterCount != len(winner) {
		t.Fatalf("Get after a losing Create: %d upstreams (AfterCount %d), the winner's %t, %v", len(got.After), got.AfterCount, slices.Equal(got.After, winner), err)
	}
	if c := chunkItems(rawItems(t, db, table, l.Name, "d")); len(c) != 2 {
		t.Errorf("chunk items after a losing Create and batch: %v, want the winner's 2", c)
	}
	if items := rawItems(t, db, table, l.Name, "d2"); len(items) != 0 {
		t.Errorf("a batch that failed left %d items of its other task", len(items))
	}
}

// TestAddUpstreamsRace: two AddUpstreams from one version: one wins, the other gets ErrConflict,
// and the stored list is the winner's whole, in one set of chunks (the old list and the loser's
// are deleted).
func TestAddUpstreamsRace(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "race"}.WithDefaults()
	now := time.Now().UTC()
	first := refs(120, l.Name)
	if err := s.Create(ctx, pendingTask(t, l, "r", first, now)); err != nil {
		t.Fatal(err)
	}
	read := mustGet(t, s, l.Name, "r")
	a, err := task.AddUpstreams(read, []task.Ref{{Lambda: "x", ID: "a1"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := task.AddUpstreams(read, refs(200, "y")[120:], now)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	done := make(chan struct{})
	go func() { errs[0] = s.AddUpstreams(ctx, a, read.Version, read.AfterCount); close(done) }()
	errs[1] = s.AddUpstreams(ctx, b, read.Version, read.AfterCount)
	<-done
	won := a
	switch {
	case errs[0] == nil && errors.Is(errs[1], task.ErrConflict):
	case errs[1] == nil && errors.Is(errs[0], task.ErrConflict):
		won = b
	default:
		t.Fatalf("racing AddUpstreams: %v; want one nil and one ErrConflict", errs)
	}
	got := mustGet(t, s, l.Name, "r")
	if !slices.Equal(got.After, won.After) || got.AfterCount != won.AfterCount || got.Version != won.Version {
		t.Fatalf("after the race: %d upstreams at version %d; want the winner's %d at %d", len(got.After), got.Version, len(won.After), won.Version)
	}
	if c := chunkItems(rawItems(t, db, table, l.Name, "r")); len(c) != (won.AfterCount+99)/100 {
		t.Errorf("chunk items after the race: %v, want only the winner's", c)
	}

	// A stale one changes nothing.
	stale, err := task.AddUpstreams(read, []task.Ref{{Lambda: "z", ID: "late"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpstreams(ctx, stale, read.Version, read.AfterCount); !errors.Is(err, task.ErrConflict) {
		t.Errorf("AddUpstreams from an old version: %v, want ErrConflict", err)
	}
	if again := mustGet(t, s, l.Name, "r"); !slices.Equal(again.After, won.After) {
		t.Errorf("a stale AddUpstreams changed the list to %d upstreams", len(again.After))
	}
	if up, err := s.Upstreams(ctx, got.Ref(), 118, 5); err != nil || !slices.Equal(up, won.After[118:min(123, len(won.After))]) {
		t.Errorf("Upstreams across the old end: %v, %v", up, err)
	}
}

// TestFlowLanes: a pending task due for its check sits in lane b, an ended task that still has
// downstreams to tell in lane n; each lane's query finds only its own tasks. An ended task
// without downstreams leaves the index, and its end expires its payload and chunk items once:
// the later transitions that tell its downstreams (ended to ended) leave their TTL alone.
func TestFlowLanes(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table, Shards: 2})
	l := task.Lambda{Name: "lanes"}.WithDefaults()
	now := time.Now().UTC().Add(-time.Minute)
	up := newTask(t, l, "up", []byte(`"`+strings.Repeat("p", 1000)+`"`), now)
	plain := newTask(t, l, "plain", nil, now)
	down := pendingTask(t, l, "down", []task.Ref{up.Ref(), {Lambda: "elsewhere", ID: "x"}}, now)
	if err := s.CreateBatch(ctx, []task.Task{up, plain, down}); err != nil {
		t.Fatal(err)
	}
	dueSK := func(id string) string { return str(rawItems(t, db, table, l.Name, id)["task"], "due_sk") }
	if sk := dueSK("down"); !strings.HasPrefix(sk, "f#") {
		t.Errorf("a pending task due for its check: due_sk %q, want lane b", sk)
	}
	marked, err := task.MarkDownstream(up, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, marked, up.Version); err != nil {
		t.Fatal(err)
	}
	ended, err := task.Cancel(marked, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, ended, marked.Version); err != nil {
		t.Fatal(err)
	}
	if sk := dueSK("up"); !strings.HasPrefix(sk, "f#") {
		t.Errorf("an ended task with downstreams to tell: due_sk %q, want lane n", sk)
	}
	ids := func(p task.DueParams) []string {
		t.Helper()
		p.Lambda, p.Before = l.Name, time.Now().UTC()
		tasks, err := s.Due(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tk := range tasks {
			out = append(out, tk.ID)
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		name string
		p    task.DueParams
		want []string
	}{
		{"pending", task.DueParams{Statuses: []task.Status{task.StatusPending}}, []string{"down"}},
		{"ended", task.DueParams{Statuses: task.Ended}, []string{"up"}},
		{"waiting, one priority", task.DueParams{Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}, Priority: l.DefaultPriority()}, []string{"plain"}},
		{"any", task.DueParams{}, []string{"down", "plain", "up"}},
	} {
		if got := ids(c.p); !slices.Equal(got, c.want) {
			t.Errorf("Due %s: %v, want %v", c.name, got, c.want)
		}
	}

	items := rawItems(t, db, table, l.Name, "up")
	payloadTTL := ""
	for sk, item := range items {
		if strings.HasPrefix(sk, "payload#") {
			payloadTTL = item["expires"].(*types.AttributeValueMemberN).Value
		}
	}
	if payloadTTL == "" {
		t.Fatal("the ended task's payload item has no TTL")
	}
	told, err := task.Notified(ended, "", true, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, told, ended.Version); err != nil {
		t.Fatal(err)
	}
	items = rawItems(t, db, table, l.Name, "up")
	if _, ok := items["task"]["due_sk"]; ok {
		t.Error("an ended task with its downstreams told is still in the due index")
	}
	for sk, item := range items {
		if strings.HasPrefix(sk, "payload#") && item["expires"].(*types.AttributeValueMemberN).Value != payloadTTL {
			t.Errorf("telling the downstreams rewrote the payload item's TTL: %v, was %s", item["expires"], payloadTTL)
		}
	}

	// The pending task ends: its chunks get its TTL.
	failed, err := task.Settle(mustGet(t, s, l.Name, "down"), []task.Settled{{Index: 0, Up: up.Ref(), Status: task.StatusCancelled}}, now)
	if err != nil || failed.Status != task.StatusUpstreamFailed {
		t.Fatalf("Settle: %s, %v", failed.Status, err)
	}
	if err := s.Update(ctx, failed, down.Version); err != nil {
		t.Fatal(err)
	}
	items = rawItems(t, db, table, l.Name, "down")
	for _, sk := range chunkItems(items) {
		if e := items[sk]["expires"]; e == nil || e.(*types.AttributeValueMemberN).Value != items["task"]["expires"].(*types.AttributeValueMemberN).Value {
			t.Errorf("chunk %s of an ended task: expires %v, want the task item's %v", sk, e, items["task"]["expires"])
		}
	}
	if counts, err := s.Counts(ctx, l.Name); err != nil || counts[task.StatusUpstreamFailed] != 1 {
		t.Errorf("Counts: %v, %v; want one upstream_failed", counts, err)
	}
}

// TestEdgeItems: an edge is one item under its upstream's pk; writing edges again, or one edge
// twice in a call, changes nothing; more than one batch call's worth (25) are all written.
func TestEdgeItems(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	up := task.Ref{Lambda: "hub", ID: "h"}
	var edges []task.Edge
	for i := range 60 {
		edges = append(edges, task.Edge{Up: up, Down: task.Ref{Lambda: fmt.Sprintf("l%d", i%3), ID: fmt.Sprintf("d%02d", i)}, Index: i})
	}
	for range 2 {
		if err := s.AddEdges(ctx, append(slices.Clone(edges), edges[7])); err != nil {
			t.Fatal(err)
		}
	}
	items := rawItems(t, db, table, up.Lambda, up.ID)
	if len(items) != len(edges) {
		t.Errorf("%d items under the upstream, want one per edge: %d", len(items), len(edges))
	}
	var got []task.Edge
	cursor := ""
	for {
		page, next, err := s.Downstreams(ctx, up, cursor, 25)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	slices.SortFunc(got, func(a, b task.Edge) int { return a.Index - b.Index })
	if !slices.Equal(got, edges) {
		t.Errorf("Downstreams: %d edges, want %d", len(got), len(edges))
	}
	if _, _, err := s.Downstreams(ctx, up, "bm90IG1pbmU", 10); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("Downstreams with a forged cursor: %v, want ErrInvalid", err)
	}
}
