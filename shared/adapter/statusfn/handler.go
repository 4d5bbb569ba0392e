package statusfn

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// Handler serves requests with a status controller: a *status.Controller in the status function.
type Handler struct {
	status executor.Status
	log    *slog.Logger
	// lambda, if set, is the one lambda whose tasks this handler serves.
	lambda string
}

// NewHandler returns a Handler over s that serves every lambda. A nil log means slog.Default.
func NewHandler(s executor.Status, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{status: s, log: log}
}

// NewLambdaHandler returns a Handler over s that serves the tasks of one lambda and refuses, as
// invalid, a request naming any other. On AWS each lambda has a status function of its own,
// which only that lambda's worker may invoke: so one lambda's worker can neither claim another's
// tasks (a claim answers the payload) nor report or release them.
func NewLambdaHandler(s executor.Status, lambda string, log *slog.Logger) *Handler {
	h := NewHandler(s, log)
	h.lambda = lambda
	return h
}

// Handle answers one request; pass it to lambda.Start. Its error is always nil: refusals and
// failures alike travel in the Response (see the package documentation).
func (h *Handler) Handle(ctx context.Context, req Request) (Response, error) {
	resp, err := h.serve(ctx, req)
	// Ids, op and outcome only: payloads, results and leases stay out of the logs.
	log := h.log.With("op", req.Op, "lambda", req.Lambda, "task_id", req.TaskID)
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("request_id", lc.AwsRequestID)
	}
	if req.Op == OpSetResult {
		log = log.With("outcome", req.Outcome)
	}
	if err != nil {
		resp = Response{V: Version, Error: errorOf(err)}
		if resp.Error.Code == codeInternal {
			log.ErrorContext(ctx, "status request failed", "code", codeInternal, "err", err)
		} else {
			log.InfoContext(ctx, "status request refused", "code", resp.Error.Code, "err", err)
		}
		return resp, nil
	}
	if resp.Task != nil {
		log = log.With("status", resp.Task.Status, "attempt", resp.Task.Attempts)
	}
	// A heartbeat every few seconds per running task would drown the rest.
	level := slog.LevelInfo
	if req.Op == OpHeartbeat {
		level = slog.LevelDebug
	}
	log.Log(ctx, level, "status request done", "code", "ok")
	resp.V = Version
	return resp, nil
}

func (h *Handler) serve(ctx context.Context, req Request) (Response, error) {
	if err := req.validate(); err != nil {
		return Response{}, err
	}
	if h.lambda != "" && req.Lambda != h.lambda {
		return Response{}, task.Errorf(task.ErrInvalid, "this status function serves lambda %s only, not %s", h.lambda, req.Lambda)
	}
	switch req.Op {
	case OpClaim:
		t, err := h.status.Claim(ctx, req.Lambda, req.TaskID, req.Delivery)
		if err != nil {
			return Response{}, err
		}
		return Response{Task: &t, Lease: t.Lease}, nil
	case OpHeartbeat:
		return Response{}, h.status.Heartbeat(ctx, req.Lambda, req.TaskID, req.Lease)
	case OpSetResult:
		r := status.Result{Outcome: req.Outcome, Result: req.Result, Error: req.Error}
		t, err := h.status.SetResult(ctx, req.Lambda, req.TaskID, req.Lease, r)
		if err != nil {
			return Response{}, err
		}
		t.Payload = nil // the worker has it: the answer stays small whatever the payload
		return Response{Task: &t}, nil
	default: // OpRelease; validate rejected the rest
		return Response{}, h.status.Release(ctx, req.Lambda, req.TaskID, req.Lease)
	}
}
