package statusfn

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

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

// batchConcurrency bounds the requests of one batch that the function serves at once.
const batchConcurrency = 16

// MaxResponseBytes is the largest answer the function gives a batch: Lambda's limit on a
// synchronous invocation's response is 6 MB, as for the request (see MaxRequestBytes).
const MaxResponseBytes = 6 << 20

// Handle answers one request, or a batch of them; pass it to lambda.Start. Its error is always
// nil: refusals and failures alike travel in the Response (see the package documentation).
func (h *Handler) Handle(ctx context.Context, req Request) (Response, error) {
	if req.V == BatchVersion {
		return h.handleBatch(ctx, req), nil
	}
	return h.handle(ctx, req), nil
}

// handleBatch answers each request of a batch as Handle answers it alone, several at once.
func (h *Handler) handleBatch(ctx context.Context, batch Request) Response {
	if err := batch.validateBatch(); err != nil {
		h.log.InfoContext(ctx, "status batch refused", "requests", len(batch.Requests), "err", err)
		return Response{V: BatchVersion, Error: errorOf(err)}
	}
	resps := make([]Response, len(batch.Requests))
	slots := make(chan struct{}, batchConcurrency)
	// The counter writes of the batch's moves go out summed, one per counter item, before the
	// answer: a move is counted once its request is answered, as when each was written alone.
	served, flush := ctx, func() {}
	if g, ok := h.status.(task.CountGatherer); ok {
		served, flush = g.GatherCounts(ctx)
	}
	var wg sync.WaitGroup
	for i, req := range batch.Requests {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			resps[i] = h.handle(served, req)
			if req.Op == OpSetResult && resps[i].Task != nil {
				resps[i].Task.Result = nil // the worker has it
			}
		})
	}
	wg.Wait()
	flush()
	h.fit(ctx, batch.Requests, resps)
	h.summarize(ctx, resps)
	return Response{V: BatchVersion, Responses: resps}
}

// summarize logs one record for a batch: how many of its requests were served, refused and
// failed. Each refusal and failure has a record of its own too (handle).
func (h *Handler) summarize(ctx context.Context, resps []Response) {
	var ok, refused, failed int
	for _, r := range resps {
		switch {
		case r.Error == nil:
			ok++
		case r.Error.Code == codeInternal:
			failed++
		default:
			refused++
		}
	}
	log := h.log
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("request_id", lc.AwsRequestID)
	}
	log.InfoContext(ctx, "status batch done", "requests", len(resps), "ok", ok, "refused", refused, "failed", failed)
}

// fit makes the answers to a batch fit in Lambda's response limit, which only claims can pass
// (their payloads and inputs): the largest are answered resend_alone until the rest fit. A
// claim without a delivery would be a new claim if sent again, so it stays; workers always name
// the delivery.
func (h *Handler) fit(ctx context.Context, reqs []Request, resps []Response) {
	const envelope = 64 // {"v":2,"responses":[...]} and the commas
	total := envelope
	var claims []int
	size := make([]int, len(resps))
	for i, r := range resps {
		b, err := json.Marshal(r)
		if err != nil {
			continue // the runtime fails the same way; nothing to fit
		}
		size[i] = len(b) + 1
		total += size[i]
		// Only a claim for a delivery is answered the same when sent again.
		if reqs[i].Op == OpClaim && reqs[i].Delivery != "" && r.Error == nil {
			claims = append(claims, i)
		}
	}
	slices.SortFunc(claims, func(a, b int) int { return cmp.Compare(size[b], size[a]) })
	for _, i := range claims {
		if total <= MaxResponseBytes {
			return
		}
		resend := Response{V: Version, Error: &Error{Code: codeResendAlone,
			Message: fmt.Sprintf("the claim's answer is %d bytes, too many beside the batch's others: send it alone", size[i])}}
		h.log.InfoContext(ctx, "status request answered resend_alone", "op", OpClaim, "lambda", reqs[i].Lambda, "task_id", reqs[i].TaskID, "bytes", size[i])
		resps[i] = resend
		b, _ := json.Marshal(resend)
		total -= size[i] - len(b) - 1
	}
}

// handle answers one request of version 1.
func (h *Handler) handle(ctx context.Context, req Request) Response {
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
		switch resp.Error.Code {
		case codeInternal:
			log.ErrorContext(ctx, "status request failed", "code", codeInternal, "err", err)
		case codeHeld:
			// Routine under a limit, every few seconds per waiting task: the batch's summary
			// counts it among the refused.
			log.DebugContext(ctx, "status request refused", "code", codeHeld, "err", err)
		default:
			log.InfoContext(ctx, "status request refused", "code", resp.Error.Code, "err", err)
		}
		return resp
	}
	if resp.Task != nil {
		log = log.With("status", resp.Task.Status, "attempt", resp.Task.Attempts)
	}
	// A record per claim, heartbeat and success would be a few per task, most of what the
	// function pays CloudWatch Logs for: the task's status and history tell what was done, and a
	// batch has its summary (summarize). A failed run's result, a release or an unclaim is
	// logged as before.
	level := slog.LevelInfo
	if req.Op == OpClaim || req.Op == OpHeartbeat || req.Op == OpSetResult && req.Outcome == status.Success {
		level = slog.LevelDebug
	}
	log.Log(ctx, level, "status request done", "code", "ok")
	resp.V = Version
	return resp
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
		claimer := status.WithMessage(status.WithNonce(status.WithLogLocation(status.WithWorker(ctx, req.Worker), req.LogLocation), req.Nonce), req.MessageID)
		if req.BudgetMS > 0 {
			var cancel context.CancelFunc
			claimer, cancel = context.WithTimeout(claimer, time.Duration(req.BudgetMS)*time.Millisecond)
			defer cancel()
		}
		t, err := h.status.Claim(claimer, req.Lambda, req.TaskID, req.Delivery, req.Token)
		if err != nil {
			return Response{}, err
		}
		return Response{Task: &t, Lease: t.Lease}, nil
	case OpHeartbeat:
		return Response{}, h.status.Heartbeat(ctx, req.Lambda, req.TaskID, req.Lease)
	case OpSetResult:
		r := status.Result{Outcome: req.Outcome, Result: req.Result, Error: req.Error}
		if req.Delay != "" {
			d, err := time.ParseDuration(req.Delay)
			if err != nil {
				return Response{}, task.Errorf(task.ErrInvalid, "delay %q: want a Go duration, such as \"30s\"", req.Delay)
			}
			r.Delay = &d
		}
		t, err := h.status.SetResult(ctx, req.Lambda, req.TaskID, req.Lease, r)
		if err != nil {
			return Response{}, err
		}
		t.Payload = nil // the worker has it: the answer stays small whatever the payload
		return Response{Task: &t}, nil
	case OpUnclaim:
		return Response{}, h.status.Unclaim(ctx, req.Lambda, req.TaskID, req.Delivery, req.Token)
	default: // OpRelease; validate rejected the rest
		return Response{}, h.status.Release(ctx, req.Lambda, req.TaskID, req.Lease)
	}
}
