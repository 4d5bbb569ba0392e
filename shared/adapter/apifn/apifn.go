// Package apifn serves the v1 HTTP API from API Gateway: proxy events (an HTTP API's payload
// format 1.0, which has the shape of a REST API's proxy event; the stack uses the $default stage,
// so the path holds no stage name) go through the aws-lambda-go-api-proxy adapter to the same
// http.Handler that `atf dev` serves, so the API has one implementation. It logs who called: API Gateway has checked the caller's IAM signature,
// and the identity it passes on is the audit trail.
package apifn

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
)

// Handler turns API Gateway proxy events into requests to an http.Handler.
type Handler struct {
	adapter *httpadapter.HandlerAdapter
	log     *slog.Logger
}

// New returns a Handler serving h.
func New(h http.Handler, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{adapter: httpadapter.New(h), log: log}
}

// Handle serves one request. Only a broken event is an error: every answer of the API, errors
// included, is a response.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	id := req.RequestContext.Identity
	if deadline, ok := ctx.Deadline(); ok {
		// The function's deadline (its timeout) ends the request a little early, so that a store
		// call cut by it is still answered, 503, rather than the function timing out.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-AnswerMargin))
		defer cancel()
	}
	resp, err := h.adapter.ProxyWithContext(ctx, req)
	h.log.Info("request",
		"request_id", req.RequestContext.RequestID, "method", req.HTTPMethod, "path", req.Path,
		"status", resp.StatusCode, "caller_arn", id.UserArn, "caller", id.Caller,
		"caller_account", id.AccountID, "source_ip", id.SourceIP)
	if err != nil {
		h.log.Error("could not serve the request", "request_id", req.RequestContext.RequestID, "err", err)
	}
	return resp, err
}

// AnswerMargin is what a request leaves of the function's time to answer: to encode the answer
// and hand it to Lambda.
const AnswerMargin = 500 * time.Millisecond

// ServeHTTP serves plain HTTP through the function handler, building the proxy event API Gateway
// would send: `atf dev --functions` serves the API this way, so local requests take the
// function's own path. The caller's identity is its address; nothing is signed locally.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGatewayBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "the request body is over API Gateway's 10 MB")
		return
	}
	req := events.APIGatewayProxyRequest{
		// API Gateway passes the path as the client sent it, still percent-encoded.
		Path: r.URL.EscapedPath(), HTTPMethod: r.Method, Headers: map[string]string{}, MultiValueHeaders: r.Header,
		QueryStringParameters: map[string]string{}, MultiValueQueryStringParameters: r.URL.Query(),
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: rand.Text(), Stage: "local", HTTPMethod: r.Method, Path: r.URL.EscapedPath(),
			Identity: events.APIGatewayRequestIdentity{SourceIP: r.RemoteAddr, UserAgent: r.UserAgent()},
		},
	}
	for k, v := range r.Header {
		req.Headers[k] = v[0]
	}
	for k, v := range r.URL.Query() {
		req.QueryStringParameters[k] = v[0]
	}
	if utf8.Valid(body) {
		req.Body = string(body)
	} else {
		req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	resp, err := h.Handle(r.Context(), req)
	if err != nil {
		writeError(w, http.StatusBadGateway, "internal", "internal error")
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		w.Header()[http.CanonicalHeaderKey(k)] = vs
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if out, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			writeError(w, http.StatusBadGateway, "internal", "internal error")
			return
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(out)
}

// maxGatewayBody is API Gateway's limit on a request's payload.
const maxGatewayBody = 10 << 20

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`+"\n", kind, msg)
}
