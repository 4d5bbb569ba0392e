package functions_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// motoDynamo passes DynamoDB requests to moto one write at a time, reads beside one another.
//
// moto (5.2.5) applies a write in place, attribute by attribute, under no lock: of concurrent
// conditional writes to one item, several can pass the condition, and a read can see a write
// half done. DynamoDB (and DynamoDB Local) apply each write to an item atomically, which every
// guarantee of atf's store rests on (a version-conditioned write wins once). The deployed stack's
// functions all reach moto through it, so that what they see is DynamoDB's order. Without it,
// TestDeployedStack's flows failed now and then under load: a mark of a running upstream and its
// success both won from one version, and the task was left running with no lease timer.
type motoDynamo struct{ mu sync.RWMutex }

// readOps are the DynamoDB operations that write nothing.
var readOps = map[string]bool{
	"GetItem": true, "BatchGetItem": true, "Query": true, "Scan": true, "TransactGetItems": true,
	"DescribeTable": true, "DescribeTimeToLive": true, "ListTables": true,
}

// forward passes r, a DynamoDB request, to moto through next: alone if it may write.
func (m *motoDynamo) forward(w http.ResponseWriter, r *http.Request, next http.Handler) {
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	if readOps[op] {
		m.mu.RLock()
		defer m.mu.RUnlock()
	} else {
		m.mu.Lock()
		defer m.mu.Unlock()
	}
	next.ServeHTTP(w, r)
}

// TestMotoDynamoOneWinner: through motoDynamo, of writers racing from one version of a task, one
// wins, as on DynamoDB. (Straight to moto, 46 of 50 such rounds had several winners.)
func TestMotoDynamoOneWinner(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t, "SQS") // the emulators' moto: SQS is served by it
	motoURL := os.Getenv("AWS_ENDPOINT_URL_SQS")
	if motoURL == "" {
		motoURL = os.Getenv("AWS_ENDPOINT_URL")
	}
	u, err := url.Parse(motoURL)
	if err != nil {
		t.Fatal(err)
	}
	var m motoDynamo
	moto := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.forward(w, r, moto) }))
	t.Cleanup(srv.Close)
	db := awstest.NewDynamoDB(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = &srv.URL })
	table := awstest.Name("atf-moto")
	ctx := t.Context()
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dynamostore.DeleteTable(ctx, db, table) })
	s, err := dynamostore.New(db, dynamostore.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := s.Create(ctx, task.Task{Lambda: "a", ID: "x", Payload: []byte(`{}`), Status: task.StatusNew, Priority: "normal", CreatedAt: now, UpdatedAt: now, Version: 1}); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		cur, err := s.Get(ctx, "a", "x")
		if err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				next := cur
				next.Version++
				next.Error = string(rune('a' + w))
				if s.Update(ctx, next, cur.Version) == nil {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d of 8 writers won from version %d, want 1", round, n, cur.Version)
		}
	}
}
