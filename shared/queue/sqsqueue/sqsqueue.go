// Package sqsqueue is the task.Queue on Amazon SQS standard queues.
//
// Each (lambda, priority) has a queue of its own, named by QueueName, so a worker drains its high
// priority first by receiving from that queue first, and a flood on one lambda never sits in front
// of another's tasks. SQS delivers at least once; that is fine, because a message carries only the
// task id (never the payload) and the store's conditional claim discards duplicates. The store is
// the source of truth: a lost message only delays its task until the consumer enqueues it again.
//
// A message's Delay becomes SQS DelaySeconds, at most 15 minutes: tasks due within it are sent
// ahead (task.EnqueueAhead), and the store holds everything further out. SQS counts whole
// seconds: a delay is rounded up, never earlier than asked, except for a message that carries its
// run time (task.Message.RunAt), which is rounded down and which the worker holds until then.
//
// Every queue has a dead-letter queue (DLQName) and a redrive policy: a message received
// MaxReceiveCount times without being deleted, or one whose body does not decode, moves there for
// people to inspect. Its task is not lost; the consumer enqueues it again after its timeout.
//
// Throttled calls, rare on standard queues, are retried by the standard retryer of the client
// passed to New; its options set how often.
package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/task"
)

// Defaults of Config.
const (
	// DefaultMaxReceiveCount is how many times a message may be received before SQS moves it to
	// the dead-letter queue. Workers delete a message as soon as its claim is settled, so a
	// message only comes back when a worker crashed or the store failed; ten of those in a row
	// mean something is wrong with the message.
	DefaultMaxReceiveCount = 10
	// MaxMaxReceiveCount is the largest count SQS accepts in a redrive policy.
	MaxMaxReceiveCount = 1000
)

// SQS limits.
const (
	// MaxNameLen is the longest queue name SQS accepts.
	MaxNameLen = 80
	// MaxBatch is the most messages one SendMessageBatch or ReceiveMessage carries.
	MaxBatch = 10
	// MaxDelay is the longest delay SQS gives a message.
	MaxDelay = 15 * time.Minute
	// MaxWait is the longest long poll; a Receive that asks for more waits this long.
	MaxWait = 20 * time.Second
	// MaxVisibility is the longest visibility timeout.
	MaxVisibility = 12 * time.Hour
)

// Retention of messages in the queues that Create makes.
const (
	// QueueRetention is the SQS maximum: a task sent first has no resend trigger, its message is
	// its only one (docs/guarantees.md, "Send, then write"), so it should outlast its lambda's
	// workers stopped for as long as SQS allows.
	QueueRetention = 14 * 24 * time.Hour
	// DLQRetention is the SQS maximum too. SQS keeps a message's original enqueue time when it
	// moves it to the dead-letter queue, so a message dead-lettered late in its retention has
	// only the rest of it there: the consumer drains every dead-letter queue every 5 minutes.
	DLQRetention = 14 * 24 * time.Hour
)

// DLQSuffix ends the name of a dead-letter queue.
const DLQSuffix = "-dlq"

// Retries of the entries of a SendMessageBatch that SQS reports as failed.
const (
	sendTries   = 4
	sendBackoff = 100 * time.Millisecond // doubles after each try
)

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// QueueName returns the name of the queue of one lambda and priority in the environment of
// prefix: prefix-lambda-priority, such as atf-dev-mail-high. Infra, docs and Create use it. It
// fails with task.ErrInvalid if a name is not valid, or if the name of the dead-letter queue
// would be over MaxNameLen characters.
func QueueName(prefix, lambda, priority string) (string, error) {
	if err := task.ValidateName("lambda name", lambda); err != nil {
		return "", err
	}
	if err := task.ValidateName("priority", priority); err != nil {
		return "", err
	}
	name := prefix + "-" + lambda + "-" + priority
	if len(DLQName(name)) > MaxNameLen {
		return "", task.Errorf(task.ErrInvalid, "queue name %s is %d characters; with %q it must fit SQS's %d: shorten the prefix, lambda or priority",
			name, len(name), DLQSuffix, MaxNameLen)
	}
	return name, nil
}

// DLQName returns the name of the dead-letter queue of the queue called name.
func DLQName(name string) string { return name + DLQSuffix }

// Config configures a Queue.
type Config struct {
	// Prefix starts every queue name and names the environment, such as atf-dev. Required:
	// letters, digits, '-' and '_'.
	Prefix string
	// MaxReceiveCount is how many times a message may be received before SQS moves it to the
	// dead-letter queue; DefaultMaxReceiveCount if zero. Create writes it into the redrive policy.
	MaxReceiveCount int
	// Logger reports messages whose body does not decode; slog.Default() if nil.
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxReceiveCount == 0 {
		c.MaxReceiveCount = DefaultMaxReceiveCount
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("sqsqueue: Prefix is required")
	}
	if !prefixPattern.MatchString(c.Prefix) {
		return fmt.Errorf("sqsqueue: Prefix %q may only hold letters, digits, '-' and '_'", c.Prefix)
	}
	if c.MaxReceiveCount < 1 || c.MaxReceiveCount > MaxMaxReceiveCount {
		return fmt.Errorf("sqsqueue: MaxReceiveCount must be in 1..%d, got %d", MaxMaxReceiveCount, c.MaxReceiveCount)
	}
	return nil
}

// Queue is a task.Queue on SQS. It is safe for concurrent use.
type Queue struct {
	client *sqs.Client
	cfg    Config
	urls   sync.Map // queue name -> URL, filled by GetQueueUrl or Create
}

var _ task.Queue = (*Queue)(nil)

// New returns a Queue on queues that exist already; Create makes them.
func New(client *sqs.Client, c Config) (*Queue, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Queue{client: client, cfg: c}, nil
}

func (q *Queue) name(lambda, priority string) (string, error) {
	return QueueName(q.cfg.Prefix, lambda, priority)
}

// url returns the URL of the queue called name, asking SQS the first time only.
func (q *Queue) url(ctx context.Context, name string) (string, error) {
	if u, ok := q.urls.Load(name); ok {
		return u.(string), nil
	}
	out, err := q.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		return "", fail(ctx, "find", name, err)
	}
	q.urls.Store(name, *out.QueueUrl)
	return *out.QueueUrl, nil
}

// fail wraps the error of op on the queue called name.
func fail(ctx context.Context, op, name string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err() // shorter than the SDK's message, and what the caller checks for
	}
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return task.Errorf(task.ErrNotFound, "SQS queue %s does not exist: create the queues with `atf dev --backend aws --create`, or deploy the stack", name)
	}
	return fmt.Errorf("sqsqueue: %s %s: %w", op, name, err)
}

// Create makes the queues of every priority of lambdas, each with its dead-letter queue and a
// redrive policy to it. It is idempotent, and brings the attributes of queues that exist already
// up to date.
func (q *Queue) Create(ctx context.Context, lambdas ...task.Lambda) error {
	var names []string
	owners := map[string]string{} // queue name -> lambda/priority, to catch names that collide
	for _, l := range lambdas {
		for _, p := range l.Priorities {
			name, err := q.name(l.Name, p)
			if err != nil {
				return err
			}
			owner := l.Name + "/" + p
			if owners[name] == owner {
				continue // listed twice
			}
			// "a-b"/"c" and "a"/"b-c" share a name; so do "a"/"b-dlq" and the DLQ of "a"/"b".
			for _, n := range []string{name, DLQName(name)} {
				if other, ok := owners[n]; ok {
					return task.Errorf(task.ErrInvalid, "queue name %s of %s is also the name of a queue of %s: rename a lambda or priority", n, owner, other)
				}
				owners[n] = owner
			}
			names = append(names, name)
		}
	}
	return each(len(names), func(i int) error { return q.create(ctx, names[i]) })
}

// create makes the queue called name and its dead-letter queue.
func (q *Queue) create(ctx context.Context, name string) error {
	dlq := DLQName(name)
	dlqURL, err := q.createQueue(ctx, dlq, map[string]string{
		string(types.QueueAttributeNameMessageRetentionPeriod): attrSeconds(DLQRetention),
	})
	if err != nil {
		return err
	}
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &dlqURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fail(ctx, "read the ARN of", dlq, err)
	}
	policy, err := json.Marshal(map[string]any{
		"deadLetterTargetArn": out.Attributes[string(types.QueueAttributeNameQueueArn)],
		"maxReceiveCount":     q.cfg.MaxReceiveCount,
	})
	if err != nil {
		return err
	}
	url, err := q.createQueue(ctx, name, map[string]string{
		string(types.QueueAttributeNameMessageRetentionPeriod): attrSeconds(QueueRetention),
		string(types.QueueAttributeNameRedrivePolicy):          string(policy),
		// A Receive without a wait must not long-poll, nor a Send without a delay wait: set
		// the queue defaults that SQS applies when a call leaves them out.
		string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
		string(types.QueueAttributeNameDelaySeconds):                  "0",
	})
	if err != nil {
		return err
	}
	q.urls.Store(name, url)
	return nil
}

// createQueue creates the queue called name with attrs, or sets attrs if it exists with others,
// such as an older redrive policy. Creating with the attributes gives a new queue its redrive
// policy from the start.
func (q *Queue) createQueue(ctx context.Context, name string, attrs map[string]string) (string, error) {
	out, err := q.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	var exists *types.QueueNameExists
	if !errors.As(err, &exists) {
		if err != nil {
			return "", fail(ctx, "create", name, err)
		}
		return *out.QueueUrl, nil
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return "", err
	}
	if _, err := q.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: attrs}); err != nil {
		return "", fail(ctx, "set the attributes of", name, err)
	}
	return url, nil
}

// Send puts msgs on their queues, MaxBatch at a time, each queue's batches concurrently with the
// others'. If a message is invalid nothing is sent. Entries that SQS fails are sent again a few
// times; an error says how many failed in the end.
func (q *Queue) Send(ctx context.Context, msgs ...task.Message) error {
	var names []string
	batches := map[string][]types.SendMessageBatchRequestEntry{}
	for _, m := range msgs {
		name, err := q.name(m.Lambda, m.Priority)
		if err != nil {
			return err
		}
		if m.TaskID == "" {
			return task.Errorf(task.ErrInvalid, "message to %s/%s needs a task id", m.Lambda, m.Priority)
		}
		if m.Delay < 0 || m.Delay > MaxDelay {
			return task.Errorf(task.ErrInvalid, "message delay must be in 0..%s, got %s for task %s", MaxDelay, m.Delay, m.TaskID)
		}
		body, err := json.Marshal(m) // Delay is not part of the body
		if err != nil {
			return err
		}
		if _, ok := batches[name]; !ok {
			names = append(names, name)
		}
		batches[name] = append(batches[name], types.SendMessageBatchRequestEntry{
			MessageBody:    aws.String(string(body)),
			DelaySeconds:   delaySeconds(m),
			MessageGroupId: messageGroup(m),
		})
	}
	return each(len(names), func(i int) error {
		name := names[i]
		url, err := q.url(ctx, name)
		if err != nil {
			return err
		}
		entries := batches[name]
		for start := 0; start < len(entries); start += MaxBatch {
			if err := q.sendBatch(ctx, name, url, entries[start:min(start+MaxBatch, len(entries))]); err != nil {
				return err
			}
		}
		return nil
	})
}

// messageGroup is the message group of m on a standard queue: its key, which makes the queue an
// SQS fair queue (one key's backlog does not raise the others' dwell time), or none.
func messageGroup(m task.Message) *string {
	if m.Key == "" {
		return nil
	}
	return aws.String(m.Key)
}

// sendBatch sends up to MaxBatch entries to one queue, and sends those that fail again, backing
// off, unless SQS blames the request.
func (q *Queue) sendBatch(ctx context.Context, name, url string, entries []types.SendMessageBatchRequestEntry) error {
	byID := map[string]types.SendMessageBatchRequestEntry{}
	for i := range entries {
		id := strconv.Itoa(i)
		entries[i].Id = &id
		byID[id] = entries[i]
	}
	backoff := sendBackoff
	for try := 1; ; try++ {
		out, err := q.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
		if err != nil {
			return fail(ctx, "send to", name, err)
		}
		if len(out.Failed) == 0 {
			return nil
		}
		var again []types.SendMessageBatchRequestEntry
		blamed := false // SQS blames the request: sending it again would fail again
		for _, f := range out.Failed {
			blamed = blamed || f.SenderFault
			again = append(again, byID[aws.ToString(f.Id)])
		}
		if blamed || try == sendTries {
			f := out.Failed[0]
			return fmt.Errorf("sqsqueue: send to %s: %d messages failed after %d tries, the first with %s: %s",
				name, len(out.Failed), try, aws.ToString(f.Code), aws.ToString(f.Message))
		}
		entries = again
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fail(ctx, "send to", name, ctx.Err())
		}
		backoff *= 2
	}
}

// Receive takes up to p.Max (at least 1, at most MaxBatch) messages from one queue, long-polling
// up to p.Wait (rounded up to whole seconds, at most MaxWait), and hides them for p.Visibility
// (rounded up to whole seconds; the queue's default, 30 s unless set, if zero).
//
// A message whose body does not decode to a task message of this queue is logged and skipped,
// neither returned nor deleted: the redrive policy moves it to the dead-letter queue, where
// people can look at it. So a Receive may return nothing before p.Wait is over.
//
// When ctx ends during a long poll, Receive returns at once with ctx's error, but SQS may still
// answer the abandoned poll: a message sent meanwhile can stay hidden for p.Visibility, and
// then comes back.
func (q *Queue) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	if p.Max < 0 || p.Wait < 0 || p.Visibility < 0 {
		return nil, task.Errorf(task.ErrInvalid, "receive max, wait and visibility must not be negative")
	}
	if p.Visibility > MaxVisibility {
		return nil, task.Errorf(task.ErrInvalid, "receive visibility must be at most %s, got %s", MaxVisibility, p.Visibility)
	}
	name, err := q.name(p.Lambda, p.Priority)
	if err != nil {
		return nil, err
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return nil, err
	}
	out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    &url,
		MaxNumberOfMessages:         int32(min(max(p.Max, 1), MaxBatch)),
		WaitTimeSeconds:             wholeSeconds(min(p.Wait, MaxWait)),
		VisibilityTimeout:           wholeSeconds(p.Visibility), // zero is left out: the queue's default
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fail(ctx, "receive from", name, err)
	}
	ds := make([]task.Delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		d, err := decode(m, p)
		if err != nil {
			q.cfg.Logger.Error("poison message left for the dead-letter queue", "queue", name,
				"message_id", aws.ToString(m.MessageId), "receive_count", d.ReceiveCount, "body", clip(aws.ToString(m.Body)), "err", err)
			continue
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// decode returns the delivery of m, received from the queue of p, or why m is poison.
func decode(m types.Message, p task.ReceiveParams) (task.Delivery, error) {
	// The count is approximate, and a message only arrives once received: at least 1.
	count, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	d := task.Delivery{ID: aws.ToString(m.MessageId), Receipt: aws.ToString(m.ReceiptHandle), ReceiveCount: max(count, 1)}
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &d.Message); err != nil {
		return d, err
	}
	if d.TaskID == "" || d.Lambda != p.Lambda || d.Priority != p.Priority {
		return d, fmt.Errorf("want a task id of %s/%s, got task %q of %s/%s", p.Lambda, p.Priority, d.TaskID, d.Lambda, d.Priority)
	}
	return d, nil
}

// clip shortens a body for the log.
func clip(s string) string {
	const n = 256
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Delete removes the message that d received. A receipt SQS does not know fails with
// task.ErrNotFound.
func (q *Queue) Delete(ctx context.Context, d task.Delivery) error {
	name, err := q.name(d.Lambda, d.Priority)
	if err != nil {
		return err
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return err
	}
	_, err = q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &d.Receipt})
	return receiptError(ctx, "delete a message from", name, d, err)
}

// Extend hides the message that d received for visibility from now, rounded up to whole seconds;
// zero makes it visible at once. It fails with task.ErrNotFound if the message is no longer
// hidden or SQS does not know the receipt.
func (q *Queue) Extend(ctx context.Context, d task.Delivery, visibility time.Duration) error {
	if visibility < 0 || visibility > MaxVisibility {
		return task.Errorf(task.ErrInvalid, "visibility must be in 0..%s, got %s", MaxVisibility, visibility)
	}
	name, err := q.name(d.Lambda, d.Priority)
	if err != nil {
		return err
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return err
	}
	_, err = q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &url, ReceiptHandle: &d.Receipt, VisibilityTimeout: wholeSeconds(visibility),
	})
	return receiptError(ctx, "extend a message of", name, d, err)
}

// ExtendAll hides the received messages ds for visibility from now, as Extend does each, in one
// ChangeMessageVisibilityBatch call per queue and 10 messages. It returns the errors of those it
// could not extend, joined (a message no longer hidden is one).
func (q *Queue) ExtendAll(ctx context.Context, ds []task.Delivery, visibility time.Duration) error {
	if visibility < 0 || visibility > MaxVisibility {
		return task.Errorf(task.ErrInvalid, "visibility must be in 0..%s, got %s", MaxVisibility, visibility)
	}
	type queueOf struct{ lambda, priority string }
	byQueue := map[queueOf][]task.Delivery{}
	var order []queueOf
	for _, d := range ds {
		k := queueOf{d.Lambda, d.Priority}
		if _, ok := byQueue[k]; !ok {
			order = append(order, k)
		}
		byQueue[k] = append(byQueue[k], d)
	}
	var errs []error
	for _, k := range order {
		name, err := q.name(k.lambda, k.priority)
		if err == nil {
			var url string
			if url, err = q.url(ctx, name); err == nil {
				for chunk := range slices.Chunk(byQueue[k], MaxBatch) {
					entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
					for i, d := range chunk {
						entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
							Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(d.Receipt), VisibilityTimeout: wholeSeconds(visibility),
						}
					}
					out, err := q.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url, Entries: entries})
					if err != nil {
						errs = append(errs, fail(ctx, "extend messages of", name, err))
						continue
					}
					for _, f := range out.Failed {
						errs = append(errs, fmt.Errorf("extend a message of %s: %s: %s", name, aws.ToString(f.Code), aws.ToString(f.Message)))
					}
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// receiptError translates the error of a call on d's receipt.
func receiptError(ctx context.Context, op, name string, d task.Delivery, err error) error {
	var invalid *types.ReceiptHandleIsInvalid
	var notInflight *types.MessageNotInflight
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid), errors.As(err, &notInflight):
		return task.Errorf(task.ErrNotFound, "message of task %s in %s: receipt is unknown, or the message is no longer hidden", d.TaskID, name)
	}
	return fail(ctx, op, name, err)
}

// wholeSeconds rounds d up to whole seconds, as SQS counts them.
func wholeSeconds(d time.Duration) int32 { return int32((d + time.Second - 1) / time.Second) }

// delaySeconds is m's delay in the whole seconds SQS takes: never earlier than asked, unless m
// carries its run time (task.Message.RunAt, a task sent ahead), which the worker waits for
// (executor.AwaitRunAt). Then it is rounded down, so the task is not up to a second late.
func delaySeconds(m task.Message) int32 {
	if m.RunAt != nil {
		return int32(m.Delay / time.Second)
	}
	return wholeSeconds(m.Delay)
}

// attrSeconds formats d as a queue attribute in seconds.
func attrSeconds(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

// maxInFlight bounds the calls that each makes at once: creating the queues of hundreds of
// lambdas at once opens as many connections, which SQS throttles and an emulator resets.
const maxInFlight = 16

// each runs fn(0), …, fn(n-1), at most maxInFlight at a time, and joins their errors.
func each(n int, fn func(int) error) error {
	errs := make([]error, n)
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
