package sqsqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/queue/queuetest"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awsmeter"
	"github.com/openatf/atf/shared/testkit/awstest"
)

var ctx = context.Background()

// patience bounds how long a test waits for messages that should be visible.
const patience = 10 * time.Second

// env is an SQS client, metered, and a queue name prefix that no other test run uses.
type env struct {
	client *sqs.Client
	meter  *awsmeter.Meter
	prefix string
}

func newEnv(t *testing.T, opts ...func(*sqs.Options)) *env {
	t.Helper()
	cfg := awstest.Config(t, "SQS")
	e := &env{meter: &awsmeter.Meter{}, prefix: awstest.Name("atft")}
	e.meter.Attach(&cfg)
	e.client = sqs.NewFromConfig(cfg, opts...)
	return e
}

// queue returns a Queue with the queues of lambdas created; they are deleted when t ends.
func (e *env) queue(t *testing.T, c sqsqueue.Config, lambdas ...task.Lambda) *sqsqueue.Queue {
	t.Helper()
	q := e.new(t, c)
	t.Cleanup(func() { e.deleteQueues(t, lambdas...) }) // also after a Create that failed halfway
	if err := q.Create(ctx, lambdas...); err != nil {
		t.Fatalf("create queues: %v", err)
	}
	return q
}

// new returns a Queue on e's prefix without creating queues.
func (e *env) new(t *testing.T, c sqsqueue.Config) *sqsqueue.Queue {
	t.Helper()
	c.Prefix = e.prefix
	q, err := sqsqueue.New(e.client, c)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func (e *env) deleteQueues(t *testing.T, lambdas ...task.Lambda) {
	for _, l := range lambdas {
		for _, p := range l.Priorities {
			name := e.name(t, l.Name, p)
			for _, n := range []string{name, sqsqueue.DLQName(name)} {
				out, err := e.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &n})
				var missing *types.QueueDoesNotExist
				if errors.As(err, &missing) {
					continue
				}
				if err == nil {
					_, err = e.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
				}
				if err != nil {
					t.Errorf("delete queue %s: %v", n, err)
				}
			}
		}
	}
}

func (e *env) name(t *testing.T, lambda, priority string) string {
	t.Helper()
	name, err := sqsqueue.QueueName(e.prefix, lambda, priority)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// url returns the URL of the queue called name, asking SQS directly.
func (e *env) url(t *testing.T, name string) string {
	t.Helper()
	out, err := e.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	return *out.QueueUrl
}

// raw receives the bodies of what is in the queue called name, bypassing Queue, until it has n
// of them.
func (e *env) raw(t *testing.T, name string, n int) []string {
	t.Helper()
	url := e.url(t, name)
	var bodies []string
	for start := time.Now(); len(bodies) < n; {
		if time.Since(start) > patience {
			t.Fatalf("queue %s: received %q within %s, want %d messages", name, bodies, patience, n)
		}
		out, err := e.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			bodies = append(bodies, *m.Body)
		}
	}
	slices.Sort(bodies)
	return bodies
}

func newLambda() task.Lambda {
	return task.Lambda{Name: awstest.Name("l"), Priorities: []string{"high", "low"}}.WithDefaults()
}

func msg(l task.Lambda, priority, id string) task.Message {
	return task.Message{Lambda: l.Name, Priority: priority, TaskID: id, Attempt: 1}
}

func params(l task.Lambda, priority string, visibility time.Duration) task.ReceiveParams {
	return task.ReceiveParams{Lambda: l.Name, Priority: priority, Max: 10, Wait: time.Second, Visibility: visibility}
}

// collect receives until it has n messages, failing on a duplicate or after patience.
func collect(t *testing.T, q *sqsqueue.Queue, p task.ReceiveParams, n int) []task.Delivery {
	t.Helper()
	var all []task.Delivery
	seen := map[string]bool{}
	for start := time.Now(); len(all) < n; {
		if time.Since(start) > patience {
			t.Fatalf("received %d messages from %s/%s within %s, want %d", len(all), p.Lambda, p.Priority, patience, n)
		}
		ds, err := q.Receive(ctx, p)
		if err != nil {
			t.Fatalf("receive from %s/%s: %v", p.Lambda, p.Priority, err)
		}
		for _, d := range ds {
			if seen[d.TaskID] {
				t.Fatalf("task %s received twice", d.TaskID)
			}
			seen[d.TaskID] = true
		}
		all = append(all, ds...)
	}
	return all
}

func ids(ds []task.Delivery) []string {
	var s []string
	for _, d := range ds {
		s = append(s, d.TaskID)
	}
	slices.Sort(s)
	return s
}

func taskIDs(prefix string, n int) []string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("%s-%02d", prefix, i))
	}
	slices.Sort(s)
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	queuetest.Exercise(t, func(t *testing.T, lambdas ...task.Lambda) task.Queue {
		return e.queue(t, sqsqueue.Config{}, lambdas...)
	})
}

func TestQueueName(t *testing.T) {
	long := strings.Repeat("x", 64)
	for _, c := range []struct {
		prefix, lambda, priority string
		want                     string // empty: ErrInvalid
	}{
		{"atf-dev", "mail", "high", "atf-dev-mail-high"},
		{"atf-dev", "mail_2", "p-1", "atf-dev-mail_2-p-1"},
		{"atf-dev", long, "high", ""},
		{"atf-dev", "mail", long, ""},
		{"atf-dev", "Mail", "high", ""},
		{"atf-dev", "mail", "", ""},
		// The longest name that fits: with "-dlq", exactly 80 characters.
		{"p", strings.Repeat("l", 64), strings.Repeat("q", 9), "p-" + strings.Repeat("l", 64) + "-" + strings.Repeat("q", 9)},
		{"p", strings.Repeat("l", 64), strings.Repeat("q", 10), ""},
	} {
		got, err := sqsqueue.QueueName(c.prefix, c.lambda, c.priority)
		if c.want == "" {
			if !errors.Is(err, task.ErrInvalid) {
				t.Errorf("QueueName(%q, %q, %q) = %q, %v; want ErrInvalid", c.prefix, c.lambda, c.priority, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("QueueName(%q, %q, %q) = %q, %v; want %q", c.prefix, c.lambda, c.priority, got, err, c.want)
		}
		if len(sqsqueue.DLQName(got)) > sqsqueue.MaxNameLen {
			t.Errorf("dead-letter queue of %s is over %d characters", got, sqsqueue.MaxNameLen)
		}
	}
}

// unused is a client for tests that must fail before any call.
var unused = sqs.New(sqs.Options{Region: "us-east-1"})

func TestNew(t *testing.T) {
	for _, c := range []struct {
		cfg   sqsqueue.Config
		field string // in the error; empty: valid
	}{
		{sqsqueue.Config{Prefix: "atf-dev"}, ""},
		{sqsqueue.Config{Prefix: "atf-dev", MaxReceiveCount: 1000}, ""},
		{sqsqueue.Config{}, "Prefix"},
		{sqsqueue.Config{Prefix: "atf.dev"}, "Prefix"},
		{sqsqueue.Config{Prefix: "atf-dev", MaxReceiveCount: -1}, "MaxReceiveCount"},
		{sqsqueue.Config{Prefix: "atf-dev", MaxReceiveCount: 1001}, "MaxReceiveCount"},
	} {
		_, err := sqsqueue.New(unused, c.cfg)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("New(%+v): %v", c.cfg, err)
		case c.field != "" && (err == nil || !strings.Contains(err.Error(), c.field)):
			t.Errorf("New(%+v): error %v, want one naming %s", c.cfg, err, c.field)
		}
	}
}

// Invalid messages and names fail before any call to SQS, so unused is never called.
func TestInvalid(t *testing.T) {
	q, err := sqsqueue.New(unused, sqsqueue.Config{Prefix: "atf-dev"})
	if err != nil {
		t.Fatal(err)
	}
	l := task.Lambda{Name: "mail", Priorities: []string{"high"}}
	tooLong := task.Lambda{Name: strings.Repeat("l", 64), Priorities: []string{strings.Repeat("p", 20)}}
	delayed := func(d time.Duration) task.Message {
		m := msg(l, "high", "t")
		m.Delay = d
		return m
	}
	receive := func(p task.ReceiveParams) error {
		_, err := q.Receive(ctx, p)
		return err
	}
	d := task.Delivery{Message: msg(l, "high", "t"), Receipt: "r"}
	for what, err := range map[string]error{
		"send over the max delay":       q.Send(ctx, delayed(sqsqueue.MaxDelay+time.Nanosecond)),
		"send with a negative delay":    q.Send(ctx, delayed(-time.Second)),
		"send without a task id":        q.Send(ctx, msg(l, "high", "")),
		"send to a too long name":       q.Send(ctx, msg(tooLong, tooLong.Priorities[0], "t")),
		"receive from a too long name":  receive(params(tooLong, tooLong.Priorities[0], time.Second)),
		"receive with visibility > 12h": receive(params(l, "high", 13*time.Hour)),
		"extend beyond 12h":             q.Extend(ctx, d, sqsqueue.MaxVisibility+time.Second),
		"extend by a negative duration": q.Extend(ctx, d, -time.Second),
		"create a too long name":        q.Create(ctx, tooLong),
		// "a-b"/"c" and "a"/"b-c" would share atf-dev-a-b-c; "a"/"b-dlq" is the DLQ of "a"/"b".
		"create colliding names": q.Create(ctx, task.Lambda{Name: "a-b", Priorities: []string{"c"}}, task.Lambda{Name: "a", Priorities: []string{"b-c"}}),
		"create a DLQ's name":    q.Create(ctx, task.Lambda{Name: "a", Priorities: []string{"b", "b-dlq"}}),
	} {
		if !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", what, err)
		}
	}
}

func TestMissingQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.new(t, sqsqueue.Config{}) // no Create
	l := newLambda()
	name := e.name(t, l.Name, "high")
	_, receiveErr := q.Receive(ctx, params(l, "high", time.Minute))
	for what, err := range map[string]error{"send": q.Send(ctx, msg(l, "high", "t")), "receive": receiveErr} {
		if !errors.Is(err, task.ErrNotFound) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "--create") {
			t.Errorf("%s to a missing queue: %v; want ErrNotFound naming %s and how to create it", what, err, name)
		}
	}
}

// Send groups messages by queue and sends them MaxBatch at a time, and finds each queue's URL
// once.
func TestSendBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	e.queue(t, sqsqueue.Config{}, l)
	q := e.new(t, sqsqueue.Config{}) // a Queue that did not create the queues knows no URL yet
	e.meter.Reset()

	var msgs []task.Message
	for _, id := range taskIDs("high", 25) {
		msgs = append(msgs, msg(l, "high", id))
	}
	for _, id := range taskIDs("low", 5) {
		msgs = append(msgs, msg(l, "low", id))
	}
	if err := q.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(ctx, msg(l, "high", "high-99")); err != nil {
		t.Fatal(err)
	}
	// 25 high in 3 batches and 5 low in 1, then 1 more.
	if got := e.meter.Calls("SQS", "SendMessageBatch"); got != 5 {
		t.Errorf("SendMessageBatch calls: %d, want 5\n%s", got, e.meter)
	}
	if got := e.meter.Calls("SQS", "GetQueueUrl"); got != 2 {
		t.Errorf("GetQueueUrl calls: %d, want 2, once per queue\n%s", got, e.meter)
	}
	if got, want := ids(collect(t, q, params(l, "high", time.Minute), 26)), append(taskIDs("high", 25), "high-99"); !slices.Equal(got, want) {
		t.Errorf("high received %v, want %v", got, want)
	}
	if got, want := ids(collect(t, q, params(l, "low", time.Minute), 5)), taskIDs("low", 5); !slices.Equal(got, want) {
		t.Errorf("low received %v, want %v", got, want)
	}
}

// record returns a client option that keeps every SendMessageBatch request.
func record(reqs *[]*sqs.SendMessageBatchInput) func(*sqs.Options) {
	var mu sync.Mutex
	return intercept(func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if r, ok := in.Parameters.(*sqs.SendMessageBatchInput); ok {
			mu.Lock()
			*reqs = append(*reqs, r)
			mu.Unlock()
		}
		return next.HandleInitialize(ctx, in)
	})
}

// intercept returns a client option that runs fn around every call.
func intercept(fn func(context.Context, middleware.InitializeInput, middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error)) func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("intercept", fn), middleware.After)
		})
	}
}

// A delay becomes DelaySeconds rounded up, so a message is never visible earlier than asked;
// rounded down for a message that carries its run time.
// TestMessageGroupIsKey: a message of a task with a key is sent in the key's message group (an
// SQS fair queue's tenant), one without a key in none, and the key comes back on its delivery.
// moto accepts and keeps the group on a standard queue, but serves it in no fair order.
func TestMessageGroupIsKey(t *testing.T) {
	t.Parallel()
	var reqs []*sqs.SendMessageBatchInput
	e := newEnv(t, record(&reqs))
	l := newLambda()
	q := e.queue(t, sqsqueue.Config{}, l)
	keyed := msg(l, "high", "keyed")
	keyed.Key = "tenant-1.eu:42"
	if err := q.Send(ctx, keyed, msg(l, "high", "bare")); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range reqs {
		for _, entry := range r.Entries {
			var m task.Message
			if err := json.Unmarshal([]byte(*entry.MessageBody), &m); err != nil {
				t.Fatal(err)
			}
			got[m.TaskID] = aws.ToString(entry.MessageGroupId)
		}
	}
	if want := map[string]string{"keyed": keyed.Key, "bare": ""}; !maps.Equal(got, want) {
		t.Errorf("MessageGroupId by task: %v, want %v", got, want)
	}
	for _, d := range collect(t, q, params(l, "high", time.Minute), 2) {
		if want := map[string]string{"keyed": keyed.Key}[d.TaskID]; d.Key != want {
			t.Errorf("delivery of task %s has key %q, want %q", d.TaskID, d.Key, want)
		}
	}
}

func TestDelaySeconds(t *testing.T) {
	t.Parallel()
	var reqs []*sqs.SendMessageBatchInput
	e := newEnv(t, record(&reqs))
	l := newLambda()
	q := e.queue(t, sqsqueue.Config{}, l)
	want := map[string]int32{}
	var msgs []task.Message
	for _, c := range []struct {
		delay time.Duration
		want  int32
	}{{0, 0}, {time.Nanosecond, 1}, {999 * time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {sqsqueue.MaxDelay, 900}} {
		m := msg(l, "high", fmt.Sprint(c.delay))
		m.Delay = c.delay
		msgs = append(msgs, m)
		want[m.TaskID] = c.want
	}
	// A message sent ahead carries its run time, which the worker waits for: rounded down.
	runAt := time.Now().Add(time.Hour)
	for _, c := range []struct {
		delay time.Duration
		want  int32
	}{{999 * time.Millisecond, 0}, {1500 * time.Millisecond, 1}, {sqsqueue.MaxDelay, 900}} {
		m := msg(l, "high", "ahead-"+fmt.Sprint(c.delay))
		m.Delay, m.RunAt = c.delay, &runAt
		msgs = append(msgs, m)
		want[m.TaskID] = c.want
	}
	if err := q.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, r := range reqs {
		for _, entry := range r.Entries {
			var m task.Message
			if err := json.Unmarshal([]byte(*entry.MessageBody), &m); err != nil {
				t.Fatal(err)
			}
			got[m.TaskID] = entry.DelaySeconds
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DelaySeconds by delay: %v, want %v", got, want)
	}

	// One message over the limit fails the whole Send before anything goes out.
	reqs = nil
	over := msg(l, "high", "over")
	over.Delay = sqsqueue.MaxDelay + time.Millisecond
	if err := q.Send(ctx, msg(l, "high", "fine"), over); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("send with a delay over %s: %v, want ErrInvalid", sqsqueue.MaxDelay, err)
	}
	if len(reqs) > 0 {
		t.Errorf("a Send with an invalid message sent %d batches", len(reqs))
	}
}

// failEntries returns a client option under which SQS fails the entries of a SendMessageBatch for
// which fail(call, entry id) is true, without sending them; call counts the SendMessageBatch calls
// from 1.
func failEntries(senderFault bool, fail func(call int, id string) bool) func(*sqs.Options) {
	var calls atomic.Int32
	return intercept(func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		batch, ok := in.Parameters.(*sqs.SendMessageBatchInput)
		if !ok {
			return next.HandleInitialize(ctx, in)
		}
		call := int(calls.Add(1))
		sent := *batch
		sent.Entries = nil
		var failed []types.BatchResultErrorEntry
		for _, entry := range batch.Entries {
			if fail(call, *entry.Id) {
				failed = append(failed, types.BatchResultErrorEntry{Id: entry.Id, Code: aws.String("InternalError"), Message: aws.String("injected"), SenderFault: senderFault})
			} else {
				sent.Entries = append(sent.Entries, entry)
			}
		}
		if len(sent.Entries) == 0 {
			return middleware.InitializeOutput{Result: &sqs.SendMessageBatchOutput{Failed: failed}}, middleware.Metadata{}, nil
		}
		in.Parameters = &sent
		out, md, err := next.HandleInitialize(ctx, in)
		if r, ok := out.Result.(*sqs.SendMessageBatchOutput); ok {
			r.Failed = append(r.Failed, failed...)
		}
		return out, md, err
	})
}

// Entries that SQS fails are sent again, and an error counts those that never went out.
func TestSendRetriesFailedEntries(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		senderFault bool
		fail        func(call int, id string) bool
		calls       int
		err         string // empty: Send succeeds
	}{
		{"three fail once", false, func(call int, id string) bool { return call == 1 && id >= "7" }, 2, ""},
		{"one always fails", false, func(_ int, id string) bool { return id == "0" }, 4, "1 messages failed after 4 tries"},
		{"the sender is at fault", true, func(_ int, id string) bool { return id == "0" }, 1, "1 messages failed after 1 tries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, failEntries(c.senderFault, c.fail))
			l := newLambda()
			q := e.queue(t, sqsqueue.Config{}, l)
			var msgs []task.Message
			for _, id := range taskIDs("t", 10) {
				msgs = append(msgs, msg(l, "high", id))
			}
			err := q.Send(ctx, msgs...)
			if got := e.meter.Calls("SQS", "SendMessageBatch"); got != c.calls {
				t.Errorf("SendMessageBatch calls: %d, want %d", got, c.calls)
			}
			want := taskIDs("t", 10)
			if c.err == "" {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("send: error %v, want one saying %q", err, c.err)
				}
				want = want[1:] // t-00 had entry id 0
			}
			if got := ids(collect(t, q, params(l, "high", time.Minute), len(want))); !slices.Equal(got, want) {
				t.Errorf("received %v, want %v", got, want)
			}
		})
	}
}

// A message received MaxReceiveCount times without a delete moves to the dead-letter queue.
func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	q := e.queue(t, sqsqueue.Config{MaxReceiveCount: 2}, l)
	if err := q.Send(ctx, msg(l, "high", "t")); err != nil {
		t.Fatal(err)
	}
	p := params(l, "high", time.Second)
	p.Wait = 5 * time.Second
	for want := 1; want <= 2; want++ {
		ds, err := q.Receive(ctx, p)
		if err != nil || len(ds) != 1 || ds[0].ReceiveCount != want {
			t.Fatalf("receive %d: %+v, %v; want the message with receive count %d", want, ds, err, want)
		}
	}
	// Visible again, but received twice already: SQS moves it instead of delivering it.
	p.Wait = 3 * time.Second
	if ds, err := q.Receive(ctx, p); err != nil || len(ds) > 0 {
		t.Fatalf("third receive: %+v, %v; want nothing", ds, err)
	}
	body := e.raw(t, sqsqueue.DLQName(e.name(t, l.Name, "high")), 1)[0]
	var m task.Message
	if err := json.Unmarshal([]byte(body), &m); err != nil || m != msg(l, "high", "t") {
		t.Fatalf("dead-letter queue holds %s, want the message of task t", body)
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	q := e.queue(t, sqsqueue.Config{}, l)
	if err := q.Send(ctx, msg(l, "high", "t")); err != nil {
		t.Fatal(err)
	}
	d := collect(t, q, params(l, "high", time.Second), 1)[0]
	if err := q.Extend(ctx, d, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Past the original visibility timeout, the message stays hidden.
	p := params(l, "high", time.Minute)
	p.Wait = 2 * time.Second
	if ds, err := q.Receive(ctx, p); err != nil || len(ds) > 0 {
		t.Fatalf("receive after extend: %v, %v; want nothing", ids(ds), err)
	}
	// Zero releases it at once.
	if err := q.Extend(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ds, err := q.Receive(ctx, p)
	if err != nil || len(ds) != 1 || ds[0].ReceiveCount != 2 || time.Since(start) > time.Second {
		t.Fatalf("receive after extend to zero: %+v, %v after %s; want the message again at once", ds, err, time.Since(start))
	}

	unknown := task.Delivery{Message: msg(l, "high", "t"), Receipt: "no-such-receipt"}
	if err := q.Extend(ctx, unknown, time.Minute); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("extend with an unknown receipt: %v, want ErrNotFound", err)
	}
	if err := q.Delete(ctx, unknown); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("delete with an unknown receipt: %v, want ErrNotFound", err)
	}
}

// A body that is not a task message of its queue is logged and left for the redrive policy.
func TestPoisonMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	var logs bytes.Buffer // written by Receive, in this goroutine only
	q := e.queue(t, sqsqueue.Config{MaxReceiveCount: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, l)
	name := e.name(t, l.Name, "high")
	url := e.url(t, name)
	poison := []string{"not json", `{"lambda":"other","priority":"high","task_id":"x","attempt":1}`}
	for _, body := range poison {
		if _, err := e.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Send(ctx, msg(l, "high", "good")); err != nil {
		t.Fatal(err)
	}

	p := params(l, "high", time.Second)
	var got []task.Delivery
	for start := time.Now(); len(got) == 0 || strings.Count(logs.String(), "poison") < len(poison); {
		if time.Since(start) > patience {
			t.Fatalf("received %v and logged %q; want task good and %d poison messages", ids(got), logs.String(), len(poison))
		}
		ds, err := q.Receive(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := q.Delete(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, ds...)
	}
	if !slices.Equal(ids(got), []string{"good"}) {
		t.Errorf("received %v, want task good alone", ids(got))
	}
	if !strings.Contains(logs.String(), "not json") {
		t.Errorf("log %q does not show the body", logs.String())
	}
	// Not deleted: received once already, they move to the dead-letter queue on the receive after
	// their visibility timeout.
	p.Wait = 3 * time.Second
	if ds, err := q.Receive(ctx, p); err != nil || len(ds) > 0 {
		t.Fatalf("receive after the visibility timeout: %v, %v; want nothing", ids(ds), err)
	}
	if got, want := e.raw(t, sqsqueue.DLQName(name), len(poison)), slices.Sorted(slices.Values(poison)); !slices.Equal(got, want) {
		t.Errorf("dead-letter queue holds %q, want %q", got, want)
	}
}

// Create is idempotent and brings the attributes of existing queues up to date.
func TestCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	e.queue(t, sqsqueue.Config{}, l)
	q := e.queue(t, sqsqueue.Config{MaxReceiveCount: 3}, l)
	if err := q.Create(ctx, l); err != nil {
		t.Fatalf("create again: %v", err)
	}
	name := e.name(t, l.Name, "low")
	attrs := func(name string) map[string]string {
		out, err := e.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(e.url(t, name)), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	main, dlq := attrs(name), attrs(sqsqueue.DLQName(name))
	var policy struct {
		DeadLetterTargetArn string
		MaxReceiveCount     json.Number
	}
	if err := json.Unmarshal([]byte(main["RedrivePolicy"]), &policy); err != nil {
		t.Fatalf("redrive policy %q: %v", main["RedrivePolicy"], err)
	}
	if policy.DeadLetterTargetArn != dlq["QueueArn"] || policy.MaxReceiveCount != "3" {
		t.Errorf("redrive policy %s, want %s after 3 receives", main["RedrivePolicy"], dlq["QueueArn"])
	}
	if main["MessageRetentionPeriod"] != "1209600" || dlq["MessageRetentionPeriod"] != "1209600" {
		t.Errorf("retention %s s, dead-letter queue %s s; want 14 days each", main["MessageRetentionPeriod"], dlq["MessageRetentionPeriod"])
	}
}

// TestExtendAll: one call per queue and 10 messages hides every message given for the
// visibility given, here past the visibility they were received with, and zero releases them
// all at once; a receipt SQS does not know fails with the rest extended.
func TestExtendAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLambda()
	q := e.queue(t, sqsqueue.Config{}, l)
	var sent []task.Message
	for i := range 12 {
		sent = append(sent, msg(l, "high", fmt.Sprintf("t%02d", i)))
	}
	sent = append(sent, msg(l, "low", "t-low"))
	if err := q.Send(ctx, sent...); err != nil {
		t.Fatal(err)
	}
	ds := append(collect(t, q, params(l, "high", time.Second), 12), collect(t, q, params(l, "low", time.Second), 1)...)
	if err := q.ExtendAll(ctx, ds, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, pr := range []string{"high", "low"} {
		p := params(l, pr, time.Minute)
		p.Wait = 2 * time.Second
		if got, err := q.Receive(ctx, p); err != nil || len(got) > 0 {
			t.Fatalf("receive from %s after ExtendAll: %v, %v; want nothing", pr, ids(got), err)
		}
	}
	unknown := task.Delivery{Message: msg(l, "high", "t00"), Receipt: "no-such-receipt"}
	if err := q.ExtendAll(ctx, append(ds, unknown), 0); err == nil {
		t.Error("ExtendAll with an unknown receipt: no error")
	}
	if got := collect(t, q, params(l, "high", time.Minute), 12); len(got) != 12 {
		t.Fatalf("after release: %d messages, want 12", len(got))
	}
}
