package eventsource_test

import (
	"context"
	"fmt"
	"log/slog"
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

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/adapter/eventsource"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// TestSQS runs a mapping on a queue of moto (or SQS) with a handler that fails one message of
// its first batch: the others are deleted, the failed one comes back with a higher receive count.
func TestSQS(t *testing.T) {
	client := sqs.NewFromConfig(awstest.Config(t, "SQS"))
	name := awstest.Name("atf-es")
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	for i := range 3 {
		if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var seen []events.SQSMessage
	done := make(chan struct{})
	handler := func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the handler's context has no deadline")
		}
		mu.Lock()
		defer mu.Unlock()
		var resp events.SQSEventResponse
		for _, r := range e.Records {
			seen = append(seen, r)
			if r.Body == "m1" && r.Attributes["ApproximateReceiveCount"] == "1" {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
			if r.Body == "m1" && r.Attributes["ApproximateReceiveCount"] == "2" {
				close(done)
			}
		}
		return resp, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// A batch stays hidden 5 s: long enough that a loaded machine deletes m0 and m2 before they
	// could come back, short enough that the failed m1 comes back well within the wait below.
	m := eventsource.SQS{Client: client, Queue: name, Handler: handler, Timeout: time.Second, Visibility: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	stopped := make(chan struct{})
	go func() { m.Run(ctx); close(stopped) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the failed message did not come back")
	}
	cancel()
	<-stopped // the batch in hand is settled first

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, r := range seen {
		count[r.Body]++
		if r.EventSource != "aws:sqs" || r.EventSourceARN == "" || r.MessageId == "" || r.ReceiptHandle == "" || r.AWSRegion == "" {
			t.Errorf("record %+v lacks what AWS sets", r)
		}
	}
	if count["m0"] != 1 || count["m2"] != 1 || count["m1"] != 2 {
		t.Errorf("deliveries %v: want m0 and m2 once (deleted), m1 twice (failed once)", count)
	}
	attrs, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
	if err != nil {
		t.Fatal(err)
	}
	left := attrs.Attributes["ApproximateNumberOfMessages"] + "/" + attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]
	if left != "0/0" {
		t.Errorf("left on the queue (visible/hidden): %s, want 0/0", left)
	}
}

// TestSQSInvalidBatchResponse: a batch response that names a failure by an empty itemIdentifier,
// or by one that is no message of the batch, fails the whole batch, as on AWS: no message of it
// is deleted, and every one comes back.
func TestSQSInvalidBatchResponse(t *testing.T) {
	client := sqs.NewFromConfig(awstest.Config(t, "SQS"))
	for _, tc := range []struct{ name, identifier string }{{"empty", ""}, {"unknown", "no-such-message-id"}} {
		t.Run(tc.name, func(t *testing.T) {
			name := awstest.Name("atf-es")
			q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: &name})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
			for _, body := range []string{"a", "b"} {
				if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			again := map[string]bool{} // the bodies delivered a second time
			done := make(chan struct{})
			handler := func(_ context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
				mu.Lock()
				defer mu.Unlock()
				var resp events.SQSEventResponse
				for _, r := range e.Records {
					if r.Attributes["ApproximateReceiveCount"] == "1" {
						// The first delivery: report a failure by no message id of the batch.
						resp.BatchItemFailures = []events.SQSBatchItemFailure{{ItemIdentifier: tc.identifier}}
						continue
					}
					again[r.Body] = true
				}
				if len(again) == 2 && resp.BatchItemFailures == nil {
					select {
					case <-done:
					default:
						close(done)
					}
				}
				return resp, nil
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			m := eventsource.SQS{Client: client, Queue: name, Handler: handler, Timeout: time.Second, Visibility: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)}
			stopped := make(chan struct{})
			go func() { m.Run(ctx); close(stopped) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("delivered again: %v; want both messages back (none deleted)", again)
			}
			cancel()
			<-stopped
		})
	}
}

// TestSchedule invokes with scheduled events at the period, each with its period's start time.
func TestSchedule(t *testing.T) {
	var times []time.Time
	ctx, cancel := context.WithCancel(t.Context())
	s := eventsource.Schedule{Period: 50 * time.Millisecond, Timeout: time.Second, Handler: func(ctx context.Context, e events.EventBridgeEvent) error {
		if e.DetailType != "Scheduled Event" || e.Source != "aws.events" {
			t.Errorf("event %+v is not a scheduled event", e)
		}
		times = append(times, time.Now())
		if len(times) == 3 {
			cancel()
		}
		return nil
	}}
	if err := s.Run(ctx); err != context.Canceled {
		t.Fatalf("Run: %v", err)
	}
	if len(times) != 3 || times[2].Sub(times[0]) < 90*time.Millisecond {
		t.Errorf("%d invocations over %s, want 3 a period apart", len(times), times[len(times)-1].Sub(times[0]))
	}
}

// TestSQSHungReceive: a receive that never answers is cut short after its long poll and
// CallTimeout, and the queue's next receive delivers the message. Without the bound, the hung
// call stopped the queue's deliveries for good.
func TestSQSHungReceive(t *testing.T) {
	cfg := awstest.Config(t, "SQS")
	client := sqs.NewFromConfig(cfg)
	name := awstest.Name("atf-es")
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}

	// A proxy to the emulator that holds the first ReceiveMessage until its caller gives up.
	upstream := os.Getenv("AWS_ENDPOINT_URL_SQS")
	if upstream == "" {
		upstream = os.Getenv("AWS_ENDPOINT_URL")
	}
	target, err := url.Parse(upstream)
	if err != nil || upstream == "" {
		t.Fatalf("the emulator's SQS endpoint %q: %v", upstream, err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	var hung atomic.Bool
	release := make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".ReceiveMessage") && hung.CompareAndSwap(false, true) {
			<-release
			return
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	defer close(release) // before the proxy closes, which waits for its handlers
	proxied := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL) })

	got := make(chan string, 1)
	handler := func(_ context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		for _, r := range e.Records {
			select {
			case got <- r.Body:
			default:
			}
		}
		return events.SQSEventResponse{}, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	m := eventsource.SQS{Client: proxied, Queue: name, Handler: handler, Timeout: time.Second, CallTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	stopped := make(chan struct{})
	go func() { m.Run(ctx); close(stopped) }()
	select {
	case body := <-got:
		if !hung.Load() || body != "m" {
			t.Errorf("delivered %q, a receive held: %v; want m, after a held receive", body, hung.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery after a receive hung")
	}
	cancel()
	<-stopped
}
