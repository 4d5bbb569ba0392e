package statusfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	// Aliased: in atf a "lambda" is a task type, and the word names variables here.
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// Invoker delivers one request payload to the status function and returns its response payload.
// An error means the call or the function failed, never that the controller refused.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// Client is the status controller as a worker on AWS sees it. Calls made together share an
// invocation: see Coalescing in the package documentation. It is safe for concurrent use.
type Client struct {
	inv         Invoker
	linger      time.Duration
	maxRequests int // in one batch: MaxBatchRequests, less in tests

	mu   sync.Mutex
	open *batch // the batch that takes new calls until it goes; nil if none
	// alone: the function refused a batch as a version it does not speak (it is older than
	// batches), so every call goes alone from now on.
	alone atomic.Bool
}

var _ executor.Status = (*Client)(nil)

// DefaultLinger is how long a call waits for others to share its invocation. The records of an
// SQS batch start their claims within microseconds of each other; a few milliseconds leave room
// for a busy machine, and add no more than that to a task's delivery or a heartbeat's latency.
const DefaultLinger = 5 * time.Millisecond

// NewClient returns a Client that calls the status function through inv, gathering calls made
// within DefaultLinger of each other into one invocation.
func NewClient(inv Invoker) *Client { return NewClientLinger(inv, DefaultLinger) }

// NewClientLinger is NewClient with a linger of its own. With linger 0 or less every call is an
// invocation of its own, as before batches.
func NewClientLinger(inv Invoker, linger time.Duration) *Client {
	return &Client{inv: inv, linger: linger, maxRequests: MaxBatchRequests}
}

// budgetMS is the time ctx leaves, in milliseconds, at least 1; 0 without a deadline.
func budgetMS(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d).Milliseconds(), 1)
}

// Claim claims an enqueued task for one delivery of its message, by the claim call token names;
// the task returned carries its lease. A call retried with the same delivery and token gets the
// same claim.
func (c *Client) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	resp, err := c.call(ctx, Request{Op: OpClaim, Lambda: lambda, TaskID: id, Delivery: delivery, Token: token,
		Nonce: status.NonceOf(ctx), MessageID: status.MessageOf(ctx), BudgetMS: budgetMS(ctx), Worker: status.WorkerOf(ctx), LogLocation: status.LogLocationOf(ctx)})
	if err != nil {
		return task.Task{}, err
	}
	if resp.Task == nil || resp.Lease == "" {
		return task.Task{}, fmt.Errorf("status function: claim of task %s/%s answered without a task and its lease", lambda, id)
	}
	t := decoded(*resp.Task)
	t.Lease = resp.Lease
	return t, nil
}

// Heartbeat reports that the lease holder still runs the task.
func (c *Client) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	_, err := c.call(ctx, Request{Op: OpHeartbeat, Lambda: lambda, TaskID: id, Lease: lease})
	return err
}

// SetResult reports how a run ended and returns the task as stored. A result too large for the
// invocation is reported as a fatal failure that says so: sent as it is, the call would fail, and
// the task would run again until dead with an error that names no cause.
func (c *Client) SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error) {
	req := Request{
		Op: OpSetResult, Lambda: lambda, TaskID: id, Lease: lease,
		Outcome: r.Outcome, Result: r.Result, Error: r.Error,
	}
	if r.Delay != nil {
		req.Delay = r.Delay.String() // exact: ParseDuration reads it back to the nanosecond
	}
	resp, err := c.call(ctx, req)
	if size := (*requestTooLarge)(nil); errors.As(err, &size) {
		req.Result, req.Error = nil, fmt.Sprintf("the %s is too large for the status call: the request is %d bytes, over Lambda's invoke limit of %d", what(r), size.bytes, MaxRequestBytes)
		if r.Outcome == status.Success {
			req.Outcome = status.Fatal
		}
		resp, err = c.call(ctx, req)
	}
	if err != nil {
		return task.Task{}, err
	}
	if resp.Task == nil {
		return task.Task{}, fmt.Errorf("status function: set_result of task %s/%s answered without the task", lambda, id)
	}
	t := decoded(*resp.Task)
	if t.Status == task.StatusSuccess && t.Result == nil {
		t.Result = req.Result // answered in a batch, which leaves out what the worker has
	}
	return t, nil
}

// Release hands the task back untried.
func (c *Client) Release(ctx context.Context, lambda, id, lease string) error {
	_, err := c.call(ctx, Request{Op: OpRelease, Lambda: lambda, TaskID: id, Lease: lease})
	return err
}

// Unclaim hands back the claim made for delivery by the call of token, if it was written: its
// answer never came.
func (c *Client) Unclaim(ctx context.Context, lambda, id, delivery, token string) error {
	_, err := c.call(ctx, Request{Op: OpUnclaim, Lambda: lambda, TaskID: id, Delivery: delivery, Token: token})
	return err
}

func (c *Client) call(ctx context.Context, req Request) (Response, error) {
	req.V = Version
	in, err := json.Marshal(req)
	if err != nil {
		// Only a result that is not JSON gets here; sending it again would not help.
		return Response{}, task.Errorf(task.ErrInvalid, "%s of task %s/%s: %v", req.Op, req.Lambda, req.TaskID, err)
	}
	if len(in) > MaxRequestBytes {
		return Response{}, &requestTooLarge{op: req.Op, lambda: req.Lambda, id: req.TaskID, bytes: len(in)}
	}
	p := &pending{ctx: ctx, req: req, body: in, done: make(chan struct{})}
	if c.linger <= 0 || c.alone.Load() {
		c.sendAlone(p)
	} else {
		c.enqueue(p)
	}
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		select {
		case <-p.done: // answered as the deadline passed: the answer is as good
			return p.resp, p.err
		default:
		}
		return Response{}, fmt.Errorf("%s of task %s/%s: %w", req.Op, req.Lambda, req.TaskID, context.Cause(ctx))
	}
}

// pending is a call on its way: answered once, when done is closed.
type pending struct {
	ctx  context.Context
	req  Request
	body []byte // req as JSON
	done chan struct{}
	resp Response
	err  error
}

func (p *pending) answer(resp Response, err error) {
	p.resp, p.err = resp, err
	close(p.done)
}

// batch is the calls that go in one invocation.
type batch struct {
	calls []*pending
	bytes int // of their requests
}

// batchEnvelope bounds what a batch adds to its requests: {"v":2,"requests":[...]} and commas.
const batchEnvelope = 32

// enqueue puts p in the open batch, opening one if none is, or if p would take it past
// MaxBatchRequests or Lambda's request limit. A batch goes Linger after its first call, or at
// once when full. Whoever takes a batch out of c.open sends it, so each goes once.
func (c *Client) enqueue(p *pending) {
	c.mu.Lock()
	var full *batch
	if b := c.open; b != nil && b.bytes+len(p.body)+1+batchEnvelope > MaxRequestBytes {
		full, c.open = b, nil
	}
	b := c.open
	if b == nil {
		b = &batch{}
		c.open = b
		time.AfterFunc(c.linger, func() {
			c.mu.Lock()
			mine := c.open == b
			if mine {
				c.open = nil
			}
			c.mu.Unlock()
			if mine {
				c.send(b)
			}
		})
	}
	b.calls = append(b.calls, p)
	b.bytes += len(p.body) + 1
	if len(b.calls) == c.maxRequests {
		c.open = nil
		go c.send(b)
	}
	c.mu.Unlock()
	if full != nil {
		go c.send(full)
	}
}

// send invokes the function once for the calls of b whose callers still wait: a request nobody
// waits for would only renew a lease its executor has given up.
func (c *Client) send(b *batch) {
	var live []*pending
	for _, p := range b.calls {
		if err := p.ctx.Err(); err != nil {
			p.answer(Response{}, err) // its caller has returned already
			continue
		}
		live = append(live, p)
	}
	switch {
	case len(live) == 0:
		return
	case len(live) == 1:
		c.sendAlone(live[0])
		return
	case c.alone.Load():
		for _, p := range live {
			go c.sendAlone(p)
		}
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	payload := make([]byte, 0, b.bytes+batchEnvelope)
	payload = fmt.Appendf(payload, `{"v":%d,"requests":[`, BatchVersion)
	for i, p := range live {
		if i > 0 {
			payload = append(payload, ',')
		}
		payload = append(payload, p.body...)
	}
	payload = append(payload, "]}"...)

	out, err := c.inv.Invoke(ctx, payload)
	var resp Response
	if err == nil {
		if uerr := json.Unmarshal(out, &resp); uerr != nil {
			err = fmt.Errorf("the status function's answer is not a response: %w", uerr)
		}
	}
	switch {
	case err != nil:
	case resp.V == Version && resp.Error != nil && resp.Error.Code == codeInvalid:
		// A function older than batches: it refused the batch whole, having done nothing.
		c.alone.Store(true)
		for _, p := range live {
			go c.sendAlone(p)
		}
		return
	case resp.Error != nil:
		err = resp.Error.err()
	case resp.V != BatchVersion || len(resp.Responses) != len(live):
		err = fmt.Errorf("the status function answered a batch of %d in version %d with %d responses", len(live), resp.V, len(resp.Responses))
	}
	if err != nil {
		for _, p := range live {
			p.answer(Response{}, fmt.Errorf("%s of task %s/%s: %w", p.req.Op, p.req.Lambda, p.req.TaskID, err))
		}
		return
	}
	for i, p := range live {
		r := resp.Responses[i]
		if r.Error != nil && r.Error.Code == codeResendAlone {
			go c.sendAlone(p)
			continue
		}
		p.answer(answerOf(p.req, r))
	}
}

// batchContext is the context of a batch's invocation: the values of its first call, the latest
// deadline of its calls (none if one has none), and cancelled once every caller has given up.
func batchContext(calls []*pending) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	latest, all := time.Time{}, true
	for _, p := range calls {
		d, ok := p.ctx.Deadline()
		all = all && ok
		if d.After(latest) {
			latest = d
		}
	}
	var cancelDeadline context.CancelFunc = func() {}
	if all {
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
	}
	ctx, cancel := context.WithCancel(ctx)
	var waiting atomic.Int64
	waiting.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, p := range calls {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
		cancelDeadline()
	}
}

// sendAlone invokes the function for p alone, in version 1, and answers p.
func (c *Client) sendAlone(p *pending) {
	out, err := c.inv.Invoke(p.ctx, p.body)
	if err != nil {
		p.answer(Response{}, fmt.Errorf("%s of task %s/%s: %w", p.req.Op, p.req.Lambda, p.req.TaskID, err))
		return
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		p.answer(Response{}, fmt.Errorf("%s of task %s/%s: the status function's answer is not a response: %w", p.req.Op, p.req.Lambda, p.req.TaskID, err))
		return
	}
	p.answer(answerOf(p.req, resp))
}

// answerOf returns the answer resp gives to req: its error, or resp itself.
func answerOf(req Request, resp Response) (Response, error) {
	if resp.Error != nil {
		return Response{}, resp.Error.err()
	}
	if resp.V != Version {
		return Response{}, fmt.Errorf("%s of task %s/%s: the status function answered in version %d, not %d", req.Op, req.Lambda, req.TaskID, resp.V, Version)
	}
	return resp, nil
}

// MaxRequestBytes is the largest request the Client sends: Lambda's limit on a synchronous
// invocation's payload, "6 MB each for request and response" in the Lambda quotas
// (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html); Lambda's error names
// 6,291,556 bytes, a little above this.
const MaxRequestBytes = 6 << 20

// requestTooLarge is the error of a request over MaxRequestBytes, which is never sent.
type requestTooLarge struct {
	op         Op
	lambda, id string
	bytes      int
}

func (e *requestTooLarge) Error() string {
	return fmt.Sprintf("%s of task %s/%s: the request is %d bytes, over Lambda's invoke limit of %d", e.op, e.lambda, e.id, e.bytes, MaxRequestBytes)
}

func (e *requestTooLarge) Unwrap() error { return task.ErrTooLarge }

// what names what made a result request large: its result, or its error.
func what(r status.Result) string {
	if r.Outcome == status.Success {
		return "result"
	}
	return "error"
}

// decoded undoes what JSON does to an absent payload or result (nil is sent as null), so a task
// from the Client reads like one from the controller itself.
func decoded(t task.Task) task.Task {
	if string(t.Payload) == "null" {
		t.Payload = nil
	}
	if string(t.Result) == "null" {
		t.Result = nil
	}
	return t
}

// LocalInvoker runs a Handler in-process, through the same JSON the function sees: the local
// runner and tests use it.
type LocalInvoker struct {
	Handler *Handler
}

// Invoke decodes payload, handles it and encodes the response, as the Lambda runtime does for
// lambda.Start(h.Handle). A payload that does not decode is an error here, as it is a function
// error there.
func (l LocalInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("status function failed: %w", err)
	}
	resp, err := l.Handler.Handle(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("status function failed: %w", err)
	}
	return json.Marshal(resp)
}

// LambdaInvoker invokes the status function on AWS and waits for its answer.
type LambdaInvoker struct {
	Client   *awslambda.Client
	Function string // the function's name or ARN
}

// Invoke calls the function synchronously (RequestResponse).
func (l LambdaInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	out, err := l.Client.Invoke(ctx, &awslambda.InvokeInput{
		FunctionName:   aws.String(l.Function),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	})
	var throttled *types.TooManyRequestsException
	switch {
	case errors.As(err, &throttled):
		// The SDK retried already; the caller counts it as a missed heartbeat or a claim to retry.
		return nil, task.Errorf(task.ErrThrottled, "invoke %s: Lambda is throttling the status function", l.Function)
	case err != nil:
		return nil, fmt.Errorf("invoke %s: %w", l.Function, err)
	}
	return invokeOutput(l.Function, out)
}

// invokeOutput returns the payload of a successful invocation. When the function itself failed
// (a panic, a timeout, a request it could not decode), Lambda still answers 200 but sets
// FunctionError, and the payload is the runtime's {"errorMessage", "errorType"}.
func invokeOutput(function string, out *awslambda.InvokeOutput) ([]byte, error) {
	if out.FunctionError == nil {
		return out.Payload, nil
	}
	var fe struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if json.Unmarshal(out.Payload, &fe) != nil || fe.Message == "" {
		fe.Message = string(out.Payload)
	}
	if len(fe.Message) > 1024 {
		fe.Message = fe.Message[:1024] + "..."
	}
	if fe.Type != "" {
		fe.Message = fe.Type + ": " + fe.Message
	}
	return nil, fmt.Errorf("function %s failed (%s): %s", function, aws.ToString(out.FunctionError), fe.Message)
}
