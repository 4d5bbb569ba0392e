// Package apifn serves the v1 HTTP API from API Gateway: REST proxy events go through the
// aws-lambda-go-api-proxy adapter to the same http.Handler that `atf dev` serves, so the API has
// one implementation. It logs who called: API Gateway has checked the caller's IAM signature,
// and the identity it passes on is the audit trail.
package apifn

import (
	"context"
	"log/slog"
	"net/http"

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
