package statusfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// Client is the status controller as a worker on AWS sees it: every call is an invocation.
type Client struct {
	inv Invoker
}

var _ executor.Status = (*Client)(nil)

// NewClient returns a Client that calls the status function through inv.
func NewClient(inv Invoker) *Client { return &Client{inv: inv} }

// Claim claims an enqueued task for one delivery of its message; the task returned carries its
// lease. A call retried for the same delivery gets the same claim.
func (c *Client) Claim(ctx context.Context, lambda, id, delivery string) (task.Task, error) {
	resp, err := c.call(ctx, Request{Op: OpClaim, Lambda: lambda, TaskID: id, Delivery: delivery})
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
	return decoded(*resp.Task), nil
}

// Release hands the task back untried.
func (c *Client) Release(ctx context.Context, lambda, id, lease string) error {
	_, err := c.call(ctx, Request{Op: OpRelease, Lambda: lambda, TaskID: id, Lease: lease})
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
	out, err := c.inv.Invoke(ctx, in)
	if err != nil {
		return Response{}, fmt.Errorf("%s of task %s/%s: %w", req.Op, req.Lambda, req.TaskID, err)
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		return Response{}, fmt.Errorf("%s of task %s/%s: the status function's answer is not a response: %w", req.Op, req.Lambda, req.TaskID, err)
	}
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
