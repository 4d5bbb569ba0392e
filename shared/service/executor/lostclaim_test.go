package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/worker"
)

var quietLog = slog.New(slog.DiscardHandler)

// batchedClaims claims through a status.Claimer, as atf dev does, and does the rest through its
// controller.
type batchedClaims struct {
	*status.Controller
	claimer *status.Claimer
}

func (b batchedClaims) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	return b.claimer.Claim(ctx, lambda, id, delivery, token)
}

// TestLostClaimAnswersSpendNoAttempt: the first claim of every attempt is written and its answer
// lost (chaostest.LostClaimAnswers). The executor hands each back, so the handler's first run is
// attempt 1, and a task of 3 attempts whose handler always fails runs 3 times, as attempts 1, 2
// and 3, before it is dead; through the controller's claims and the Claimer's batches alike.
func TestLostClaimAnswersSpendNoAttempt(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lostClaimAnswers(t, store)
}

// TestLostClaimAnswersSpendNoAttemptAWS is TestLostClaimAnswersSpendNoAttempt on DynamoDB.
func TestLostClaimAnswersSpendNoAttemptAWS(t *testing.T) {
	lostClaimAnswers(t, awstest.NewBackend(t, "atf-lostclaim").Store)
}

func lostClaimAnswers(t *testing.T, inner task.Store) {
	for _, batched := range []bool{false, true} {
		name := "controller"
		if batched {
			name = "claimer"
		}
		t.Run(name, func(t *testing.T) {
			cfg := task.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}.WithDefaults()
			l := task.Lambda{Name: "lost" + name, Timeout: time.Minute, MaxAttempts: 3}.WithDefaults()
			store := &chaostest.LostClaimAnswers{Store: inner}
			hsc := status.New(store, status.Config{Task: cfg, Logger: quietLog})
			var st executor.Status = hsc
			if batched {
				k := status.NewClaimer(hsc)
				t.Cleanup(k.Close)
				st = batchedClaims{hsc, k}
			}
			q := memqueue.New()
			cons := consumer.New(store, q, consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Logger: quietLog})
			e := executor.New(st, executor.Config{Task: cfg, Logger: quietLog})
			tk, err := task.New(task.Spec{ID: "t1"}, l, time.Now().UTC(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Create(t.Context(), tk); err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex
			var ran []int // the attempt of each run
			fails := worker.HandlerFunc(func(_ context.Context, wt worker.Task) (json.RawMessage, error) {
				mu.Lock()
				ran = append(ran, wt.Attempt)
				mu.Unlock()
				return nil, errors.New("always fails, retriably")
			})
			lost := 0
			// A worker's loop, a pass at a time: the consumer enqueues what is due, the worker
			// claims what it receives and runs what it claimed. The message goes either way.
			for pass := 0; pass < 200; pass++ {
				if stored, err := store.Get(t.Context(), l.Name, "t1"); err != nil {
					t.Fatal(err)
				} else if stored.Status.Terminal() {
					break
				}
				if _, err := cons.Sweep(t.Context()); err != nil {
					t.Logf("sweep: %v", err) // a slow emulator: the next pass sweeps again
				}
				ds, err := q.Receive(t.Context(), task.ReceiveParams{Lambda: l.Name, Priority: tk.Priority, Max: 10, Visibility: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					c, err := e.Claim(t.Context(), d.Lambda, d.TaskID, d.Receipt)
					_ = q.Delete(t.Context(), d)
					if err != nil {
						if task.Refused(err) {
							t.Fatalf("claim refused: %v", err)
						}
						lost++
						continue
					}
					e.Run(t.Context(), l, fails, c)
				}
				if len(ds) == 0 {
					time.Sleep(10 * time.Millisecond) // a retry's backoff (1 ms), by the wall clock
				}
			}

			stored, err := store.Get(t.Context(), l.Name, "t1")
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []int{1, 2, 3}; !slices.Equal(ran, want) || stored.Status != task.StatusDead || stored.Attempts != 3 {
				t.Fatalf("the handler ran as attempts %v, and the task ended %s after %d attempts; want runs %v, then dead after 3", ran, stored.Status, stored.Attempts, want)
			}
			if lost != 3 || store.Lost() != 3 {
				t.Fatalf("%d claims failed, %d answers lost; want one lost answer before each of the 3 runs", lost, store.Lost())
			}
		})
	}
}

// dropAnswers forwards DynamoDB's writes and drops the answers of the next drop of them, as a
// connection reset after the request went out: the write lands, and the SDK sees a retryable
// connection error.
type dropAnswers struct {
	base http.RoundTripper
	drop atomic.Int32
}

func (d *dropAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err != nil || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.UpdateItem" || d.drop.Add(-1) < 0 {
		return resp, err
	}
	resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// TestLostClaimResponseAWS: the answer of a claim's UpdateItem is lost on the wire after DynamoDB
// wrote it. The SDK retries the write, which then fails its condition; the controller reads the
// task again and finds its delivery's claim, and answers it: attempt 1, with no second attempt
// counted. When every try's answer is lost, the claim fails, and the executor hands it back: the
// task is new again, its attempt not counted.
func TestLostClaimResponseAWS(t *testing.T) {
	b := awstest.NewBackend(t, "atf-lostresp")
	drop := &dropAnswers{base: http.DefaultTransport}
	db := awstest.NewDynamoDB(awstest.Config(t, "DYNAMODB"), func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: drop} })
	store, err := dynamostore.New(db, dynamostore.Config{Table: b.Name})
	if err != nil {
		t.Fatal(err)
	}
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: "lostresp"}.WithDefaults()
	hsc := status.New(store, status.Config{Task: cfg, Logger: quietLog})
	e := executor.New(hsc, executor.Config{Task: cfg, Logger: quietLog})
	for _, tc := range []struct {
		id      string
		dropped int32
	}{{"one-lost", 1}, {"all-lost", dynamostore.MaxAttempts}} {
		tk, _ := task.New(task.Spec{ID: tc.id}, l, time.Now().UTC(), cfg)
		enq, _ := task.Enqueue(tk, tk.RunAt, cfg)
		if err := store.Create(t.Context(), enq); err != nil {
			t.Fatal(err)
		}
		drop.drop.Store(tc.dropped)
		c, err := e.Claim(t.Context(), l.Name, tc.id, "receipt-"+tc.id)
		drop.drop.Store(0)
		stored, gerr := b.Store.Get(t.Context(), l.Name, tc.id)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case tc.dropped == 1 && (err != nil || c.Attempts != 1 || stored.Status != task.StatusProcessing || stored.Lease != c.Lease || stored.Attempts != 1):
			t.Errorf("%s: claim %+v, %v; stored %s under %q, attempt %d: want the claim answered, attempt 1", tc.id, c.Task, err, stored.Status, stored.Lease, stored.Attempts)
		case tc.dropped > 1 && (err == nil || stored.Status != task.StatusNew || stored.Attempts != 0 || stored.Lease != ""):
			t.Errorf("%s: claim %v; stored %s under %q, attempt %d: want the claim failed and handed back, new, attempt 0", tc.id, err, stored.Status, stored.Lease, stored.Attempts)
		}
	}
}
