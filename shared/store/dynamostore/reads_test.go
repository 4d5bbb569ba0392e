package dynamostore_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awsmeter"
)

// itemsRead counts the items DynamoDB reads for the client: what a query scans (index entries
// included, whatever it returns) and what batch and single reads return. Capacity is charged by
// these, so a bound on them is a bound on the read cost.
func itemsRead(n *atomic.Int64) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("items-read", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				switch r := out.Result.(type) {
				case *dynamodb.QueryOutput:
					n.Add(int64(r.ScannedCount))
				case *dynamodb.ScanOutput:
					n.Add(int64(r.ScannedCount))
				case *dynamodb.BatchGetItemOutput:
					for _, items := range r.Responses {
						n.Add(int64(len(items)))
					}
				case *dynamodb.GetItemOutput:
					if r.Item != nil {
						n.Add(1)
					}
				}
				return out, md, err
			}), middleware.After)
		})
	}
}

// backlog creates n tasks of l, in batches, each changed by edit first.
func backlog(t *testing.T, s task.Store, l task.Lambda, prefix string, n int, now time.Time, edit func(*task.Task)) {
	t.Helper()
	var batch []task.Task
	for i := range n {
		tk := newTask(t, l, fmt.Sprintf("%s-%d", prefix, i), nil, now)
		edit(&tk)
		if batch = append(batch, tk); len(batch) == task.MaxBatch || i == n-1 {
			if err := s.CreateBatch(t.Context(), batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

const (
	readShards = 2
	readQuota  = 20
	// readBacklog is many times the quota: a read that grows with the backlog shows.
	readBacklog = 400
)

// boundedSetup returns a store whose reads are counted, and a consumer on it with a small quota.
func boundedSetup(t *testing.T, l task.Lambda, now *time.Time) (task.Store, *consumer.Consumer, *atomic.Int64) {
	var reads atomic.Int64
	db, table := newTable(t, nil, itemsRead(&reads))
	s := newStore(t, db, dynamostoreConfig(table))
	c := consumer.New(s, memqueue.New(), consumer.Config{
		Lambdas: task.FixedCatalog{l}, Task: task.Config{EnqueueQuota: readQuota},
		Now: func() time.Time { return *now }, Jitter: func() float64 { return 0 },
	})
	return s, c, &reads
}

// sweepReads sweeps once and returns the items it read and what it did.
func sweepReads(t *testing.T, c *consumer.Consumer, reads *atomic.Int64) (int64, consumer.Stats) {
	t.Helper()
	reads.Store(0)
	st, err := c.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return reads.Load(), st
}

// sweepBound is what one sweep of a lambda with P priorities may read: a quota of tasks (each an
// index entry and the task itself) per part that moves tasks, and a few entries per shard for
// each lane it looks at (a jump over a held collection reads one entry), and the lambda's counter
// items, one per shard, when it has tasks to enqueue.
func sweepBound(l task.Lambda) int64 {
	parts := int64(3) // drop or unpark, and the enqueued and waiting lanes, whose quota is shared
	return parts*2*readQuota + int64(readShards)*int64(len(l.Priorities)+6)
}

// TestPausedBacklogReads: a paused collection with a backlog many times the quota costs each
// sweep reads bounded by the quota. The sweep parks what it meets, a quota at a time; once
// parked, the backlog costs nothing to the sweeps, and opening the gate unparks it a quota per
// sweep. Every task runs once the gate opens.
func TestPausedBacklogReads(t *testing.T) {
	now := time.Now().UTC()
	l := task.Lambda{Name: "paused", MaxEnqueued: readBacklog}.WithDefaults() // no worker claims them
	s, c, reads := boundedSetup(t, l, &now)
	backlog(t, s, l, "held", readBacklog, now.Add(-time.Minute), func(tk *task.Task) { tk.Collection = "held" })
	if err := s.SetGate(t.Context(), task.Gate{Lambda: l.Name, Collection: "held", Mode: task.GatePause}); err != nil {
		t.Fatal(err)
	}
	bound := sweepBound(l)
	// Parking takes a quota per priority lane a sweep; then the backlog is out of the way.
	for sweep := range readBacklog/readQuota + 1 {
		n, st := sweepReads(t, c, reads)
		if n > bound {
			t.Fatalf("sweep %d read %d items with a paused backlog of %d; want at most %d", sweep, n, readBacklog, bound)
		}
		if st.Enqueued != 0 {
			t.Fatalf("sweep %d enqueued %d tasks of a paused collection", sweep, st.Enqueued)
		}
	}
	if n, _ := sweepReads(t, c, reads); n > int64(readShards*(len(l.Priorities)+3)) {
		t.Errorf("a sweep with the backlog parked read %d items; want a few per shard and lane", n)
	}

	if err := s.SetGate(t.Context(), task.Gate{Lambda: l.Name, Collection: "held", Mode: task.GateOpen}); err != nil {
		t.Fatal(err)
	}
	enqueued := 0
	for range readBacklog {
		n, st := sweepReads(t, c, reads)
		if n > bound {
			t.Fatalf("a sweep after the gate opened read %d items; want at most %d", n, bound)
		}
		if enqueued += st.Enqueued; enqueued == readBacklog {
			break
		}
	}
	if enqueued != readBacklog {
		t.Errorf("enqueued %d of %d once the gate opened", enqueued, readBacklog)
	}
}

// TestDropGateReads: a dropped lambda with a large finished history costs each sweep reads
// bounded by the quota, and its waiting tasks, due or not, end as dropped.
func TestDropGateReads(t *testing.T) {
	now := time.Now().UTC()
	l := task.Lambda{Name: "dropped"}.WithDefaults()
	s, c, reads := boundedSetup(t, l, &now)
	backlog(t, s, l, "done", readBacklog, now.Add(-time.Hour), func(tk *task.Task) {
		tk.Status, tk.NextTriggerAt = task.StatusSuccess, nil
	})
	backlog(t, s, l, "wait", 30, now.Add(-time.Minute), func(tk *task.Task) {})
	backlog(t, s, l, "later", 30, now.Add(time.Hour), func(tk *task.Task) {})
	if err := s.SetGate(t.Context(), task.Gate{Lambda: l.Name, Mode: task.GateDrop}); err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for range readBacklog {
		n, st := sweepReads(t, c, reads)
		if n > sweepBound(l) {
			t.Fatalf("a sweep of a dropped lambda read %d items with %d finished tasks; want at most %d", n, readBacklog, sweepBound(l))
		}
		if dropped += st.Dropped; st.Dropped == 0 {
			break
		}
	}
	if dropped != 60 {
		t.Errorf("dropped %d tasks, want the 60 waiting ones, due or not", dropped)
	}
}

// TestCountsReads: counting a lambda's tasks reads its counter items, one per shard, whatever
// the number of tasks; and the counts follow every write.
func TestCountsReads(t *testing.T) {
	now := time.Now().UTC()
	l := task.Lambda{Name: "counted"}.WithDefaults()
	s, _, reads := boundedSetup(t, l, &now)
	backlog(t, s, l, "done", readBacklog, now, func(tk *task.Task) { tk.Status, tk.NextTriggerAt = task.StatusSuccess, nil })
	backlog(t, s, l, "new", 7, now, func(tk *task.Task) {})
	reads.Store(0)
	counts, err := s.Counts(t.Context(), l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusSuccess] != readBacklog || counts[task.StatusNew] != 7 || len(counts) != 2 {
		t.Errorf("Counts: %v, want %d success and 7 new", counts, readBacklog)
	}
	if n := reads.Load(); n > readShards {
		t.Errorf("Counts read %d items with %d tasks; want at most one per shard (%d)", n, readBacklog+7, readShards)
	}
}

func dynamostoreConfig(table string) dynamostore.Config {
	return dynamostore.Config{Table: table, Shards: readShards}
}

// TestFilteredListReads: a list filtered by status, collection or both, over a lambda with many
// finished tasks and few that match, reads at most the page's budget of index entries per shard
// for each page, and the pages together hold every match once, in order. The index holds the
// collection: a page filtered by collection alone reads the page's tasks besides. It does not
// hold the status, which a page filtered by status reads from the task items: at most the budget
// of them, the page's tasks among them.
func TestFilteredListReads(t *testing.T) {
	const finished, limit = 1000, 10
	now := time.Now().UTC()
	l := task.Lambda{Name: "listed"}.WithDefaults()
	var reads atomic.Int64
	var meter awsmeter.Meter
	db, table := newTable(t, &meter, itemsRead(&reads))
	s := newStore(t, db, dynamostoreConfig(table))
	backlog(t, s, l, "done", finished, now.Add(-time.Hour), func(tk *task.Task) {
		tk.Status, tk.NextTriggerAt, tk.Collection = task.StatusSuccess, nil, "common"
	})
	backlog(t, s, l, "rare", 2, now, func(tk *task.Task) { tk.Collection = "rare" })

	for _, p := range []task.ListParams{
		{Status: task.StatusNew},
		{Collection: "rare"},
		{Status: task.StatusNew, Collection: "rare"},
	} {
		p.Lambda, p.Limit = l.Name, limit
		tasksRead := limit
		if p.Status != "" {
			tasksRead = p.ReadBudget()
		}
		bound := int64(readShards*p.ReadBudget() + tasksRead)
		var got []string
		pages, units := 0, 0.0
		for {
			if pages++; pages > finished/p.ReadBudget()+2 {
				t.Fatalf("%+v: still paging after %d pages", p, pages)
			}
			reads.Store(0)
			meter.Reset()
			tasks, next, err := s.List(t.Context(), p)
			units += readUnits(&meter)
			if err != nil {
				t.Fatal(err)
			}
			if n := reads.Load(); n > bound {
				t.Errorf("%+v: page %d read %d items beside %d finished tasks; want at most %d (%d shards × budget %d, and %d tasks)",
					p, pages, n, finished, bound, readShards, p.ReadBudget(), tasksRead)
			}
			for _, tk := range tasks {
				got = append(got, tk.ID)
			}
			if next == "" {
				break
			}
			p.Cursor = next
		}
		if want := []string{"rare-0", "rare-1"}; !slices.Equal(got, want) {
			t.Errorf("%+v: listed %v, want %v", p, got, want)
		}
		t.Logf("status %q, collection %q: %d pages, %.1f RRU as DynamoDB Local reports them", p.Status, p.Collection, pages, units)
	}
}

// readUnits is the read units the meter saw on DynamoDB.
func readUnits(m *awsmeter.Meter) float64 {
	var r float64
	for op, c := range m.Counts() {
		if op.Service == "DynamoDB" {
			r += c.Read
		}
	}
	return r
}

// TestRecount: Recount rebuilds counters that drifted from the tasks' statuses, which it reads
// from the task items (the list index holds no status).
func TestRecount(t *testing.T) {
	ctx := t.Context()
	now := time.Now().UTC()
	l := task.Lambda{Name: "recounted"}.WithDefaults()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostoreConfig(table))
	backlog(t, s, l, "done", 150, now, func(tk *task.Task) { tk.Status, tk.NextTriggerAt = task.StatusSuccess, nil })
	backlog(t, s, l, "new", 7, now, func(tk *task.Task) {})
	for i := range 3 {
		enq, err := task.Enqueue(mustGet(t, s, l.Name, fmt.Sprint("new-", i)), now, task.Config{}.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, enq, enq.Version-1); err != nil {
			t.Fatal(err)
		}
	}
	// Drift: every counter of the lambda lost.
	for shard := range readShards {
		_, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("count#%s#%d", l.Name, shard)}, "sk": &types.AttributeValueMemberS{Value: "count"},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if counts, err := s.Counts(ctx, l.Name); err != nil || len(counts) != 0 {
		t.Fatalf("Counts with the counters gone: %v, %v", counts, err)
	}
	if err := s.Recount(ctx, l.Name); err != nil {
		t.Fatal(err)
	}
	counts, err := s.Counts(ctx, l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[task.Status]int{task.StatusSuccess: 150, task.StatusNew: 4, task.StatusEnqueued: 3}; !maps.Equal(counts, want) {
		t.Errorf("Counts after Recount: %v, want %v", counts, want)
	}
}

// TestListByStatusPayloads: a list filtered by status reads the task items to learn their
// status, and then the payload items of the page's tasks only, not of those it left out.
func TestListByStatusPayloads(t *testing.T) {
	now := time.Now().UTC()
	l := task.Lambda{Name: "heavy-list"}.WithDefaults()
	var reads atomic.Int64
	db, table := newTable(t, nil, itemsRead(&reads))
	s := newStore(t, db, dynamostoreConfig(table))
	big := []byte(`"` + strings.Repeat("p", 2*dynamostore.InlinePayload) + `"`)
	for i, st := range []task.Status{task.StatusNew, task.StatusSuccess, task.StatusNew, task.StatusSuccess, task.StatusSuccess} {
		tk := newTask(t, l, fmt.Sprint("t", i), big, now.Add(time.Duration(i)*time.Millisecond))
		if tk.Status = st; st.Terminal() {
			tk.NextTriggerAt = nil
		}
		if err := s.Create(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
	}
	reads.Store(0)
	tasks, next, err := s.List(t.Context(), task.ListParams{Lambda: l.Name, Status: task.StatusNew})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range tasks {
		got = append(got, tk.ID)
		if string(tk.Payload) != string(big) {
			t.Errorf("%s: a %d-byte payload, want the %d bytes scheduled", tk.ID, len(tk.Payload), len(big))
		}
	}
	if !slices.Equal(got, []string{"t0", "t2"}) || next != "" {
		t.Errorf("listed %v, next %q; want [t0 t2] and no cursor", got, next)
	}
	// 5 index entries, 5 task items, and the 2 payload items of the page.
	if n := reads.Load(); n != 12 {
		t.Errorf("the page read %d items, want 12: 5 entries, 5 task items, 2 payload items", n)
	}
}

// TestListFailedReads: a page of the failed tasks of every lambda reads at most limit+1 index
// entries from each partition of the statuses asked for and the page's task items, whatever the
// backlog: 400 failed tasks of 40 lambdas beside 400 that succeeded.
func TestListFailedReads(t *testing.T) {
	now := time.Now().UTC()
	var reads atomic.Int64
	db, table := newTable(t, nil, itemsRead(&reads))
	s := newStore(t, db, dynamostoreConfig(table))
	for i := range 40 {
		l := task.Lambda{Name: fmt.Sprint("failing-", i)}.WithDefaults()
		backlog(t, s, l, "t", 20, now, func(tk *task.Task) {
			n, _ := strconv.Atoi(strings.TrimPrefix(tk.ID, "t-"))
			tk.Status, tk.NextTriggerAt, tk.UpdatedAt = task.StatusSuccess, nil, now.Add(time.Duration(20*i+n)*time.Millisecond)
			if n%2 == 0 {
				tk.Status = task.Failed[n/2%2]
			}
		})
	}
	const limit = 10
	for _, p := range []task.FailedParams{{Limit: limit}, {Limit: limit, Statuses: []task.Status{task.StatusDead}}} {
		var seen []string
		for page := range 3 {
			reads.Store(0)
			tasks, next, err := s.ListFailed(t.Context(), p)
			if err != nil || len(tasks) != limit || next == "" {
				t.Fatalf("ListFailed %+v, page %d: %d tasks, next %q, %v; want %d and a cursor", p, page, len(tasks), next, err, limit)
			}
			for _, tk := range tasks {
				seen = append(seen, tk.Lambda+"/"+tk.ID)
			}
			bound := int64(len(p.StatusSet())*dynamostore.FailedShards*(limit+1) + limit)
			if n := reads.Load(); n > bound {
				t.Errorf("ListFailed %+v, page %d read %d items, want at most %d", p, page, n, bound)
			}
			p.Cursor = next
		}
		// The latest first: lambda 39's, t-18 down to t-0, then lambda 38's.
		var want []string
		for i := 39; len(want) < 3*limit; i-- {
			for n := 18; n >= 0 && len(want) < 3*limit; n -= 2 {
				if p.Statuses == nil || task.Failed[n/2%2] == task.StatusDead {
					want = append(want, fmt.Sprintf("failing-%d/t-%d", i, n))
				}
			}
		}
		if !slices.Equal(seen, want) {
			t.Errorf("ListFailed %+v: %v, want %v", p, seen, want)
		}
	}
}

// TestConflictRetriedWithoutRead: a transition whose write meets a task that moved on since its
// read tries again from the item the failed write answered (task.Changed), with no read of its
// own; a transition that needs the payload kept in an item of its own reads the task again.
func TestConflictRetriedWithoutRead(t *testing.T) {
	ctx := t.Context()
	var reads atomic.Int64
	db, table := newTable(t, nil, itemsRead(&reads))
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "l"}.WithDefaults()
	now := time.Now().UTC()
	large := []byte(`"` + strings.Repeat("x", dynamostore.InlinePayload) + `"`)
	for _, c := range []struct {
		name       string
		payload    []byte
		apply      func(context.Context, task.Store, string, string, func(task.Task) (task.Task, error)) (task.Task, error)
		retryReads int64 // items the retry reads
	}{
		{"small payload", []byte(`{"n":1}`), task.Apply, 0},
		{"state of a large payload", large, task.ApplyState, 0},
		{"whole of a large payload", large, task.Apply, 2}, // the task item and its payload item
	} {
		t.Run(c.name, func(t *testing.T) {
			id := task.NewID(now)
			tk := newTask(t, l, id, c.payload, now)
			if err := s.Create(ctx, tk); err != nil {
				t.Fatal(err)
			}
			var seen []task.Task
			got, err := c.apply(ctx, s, l.Name, id, func(cur task.Task) (task.Task, error) {
				seen = append(seen, cur)
				if len(seen) == 1 {
					// Another writer moves the task on between this read and its write.
					other := cur
					other.Version, other.Error = cur.Version+1, "the other writer's"
					if err := s.Update(ctx, other, cur.Version); err != nil {
						t.Fatal(err)
					}
					reads.Store(0)
				}
				next := cur
				next.Version, next.Error = cur.Version+1, "mine"
				return next, nil
			})
			if err != nil || len(seen) != 2 {
				t.Fatalf("apply: %v after %d transitions, want 2", err, len(seen))
			}
			if retry := seen[1]; retry.Version != tk.Version+1 || retry.Error != "the other writer's" {
				t.Errorf("the retry started from version %d with error %q, want the other writer's write", retry.Version, retry.Error)
			}
			if n := reads.Load(); n != c.retryReads {
				t.Errorf("the retry read %d items, want %d", n, c.retryReads)
			}
			if c.retryReads > 0 && string(got.Payload) != string(c.payload) {
				t.Errorf("the retry's task has a payload of %d bytes, want the task's %d", len(got.Payload), len(c.payload))
			}
			stored, err := s.Get(ctx, l.Name, id)
			if err != nil || stored.Error != "mine" || stored.Version != tk.Version+2 {
				t.Errorf("stored version %d with error %q, %v; want the retry's write at version %d", stored.Version, stored.Error, err, tk.Version+2)
			}
		})
	}
}
