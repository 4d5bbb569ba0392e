package lambdaruntime

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/adapter/eventsource"
)

// IntegrationTimeout is how long API Gateway waits for the function (29 s, the most an HTTP
// API's Lambda integration allows).
const IntegrationTimeout = 29 * time.Second

// ProxyRequest is the proxy event of r as an API Gateway HTTP API sends it with payload format
// 1.0 (the REST proxy event shape), on the $default stage: the path as the client sent it.
func ProxyRequest(r *http.Request, body []byte) events.APIGatewayProxyRequest {
	path := r.URL.EscapedPath()
	req := events.APIGatewayProxyRequest{
		Resource: path, Path: path, HTTPMethod: r.Method,
		Headers: map[string]string{}, MultiValueHeaders: map[string][]string{},
		RequestContext: events.APIGatewayProxyRequestContext{
			AccountID: account, APIID: "local", Stage: "$default", RequestID: newRequestID(),
			RequestTime: time.Now().UTC().Format("02/Jan/2006:15:04:05 -0700"), RequestTimeEpoch: time.Now().UnixMilli(),
			HTTPMethod: r.Method, Path: path, Protocol: r.Proto, DomainName: r.Host,
			Identity: events.APIGatewayRequestIdentity{SourceIP: hostOf(r.RemoteAddr), UserAgent: r.UserAgent()},
		},
	}
	for k, vs := range r.Header {
		req.Headers[k] = vs[len(vs)-1]
		req.MultiValueHeaders[k] = vs
	}
	if len(r.URL.Query()) > 0 {
		req.QueryStringParameters, req.MultiValueQueryStringParameters = map[string]string{}, r.URL.Query()
		for k, vs := range r.URL.Query() {
			req.QueryStringParameters[k] = vs[len(vs)-1]
		}
	}
	if utf8.Valid(body) {
		req.Body = string(body)
	} else {
		req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return req
}

func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return addr[:i]
	}
	return addr
}

// APIGateway is an http.Handler that serves requests through an API function as an HTTP API
// with a Lambda proxy integration (payload format 1.0) does: each request becomes a proxy event,
// the function's proxy response becomes the answer. A function that fails answers 500
// {"message":"Internal Server Error"}, one that runs out of its own time too (Lambda reports it as
// a function error); at the integration's timeout the client gets 503 {"message":"Service
// Unavailable"}, as API Gateway answers. The invocation is Lambda's, not the client's: it runs on
// to its end or the function's deadline when the client goes away or the integration times out.
// With Auth it authorizes each matched route as the stack's IAM authorization does (SigV4); it
// does not throttle.
type APIGateway struct {
	Function *Function
	Auth     *SigV4        // if set, a request must be signed (403 otherwise); nil lets every one in
	Timeout  time.Duration // the integration's timeout [IntegrationTimeout]
	// Routes are the HTTP API's route keys ("GET /v1/lambdas/{lambda}/tasks", "$default"), as
	// the template's AWS::ApiGatewayV2::Route resources give them: a request no route matches is
	// answered 404 {"message":"Not Found"} without reaching the function, and the matched route
	// gives the event its resource and path parameters. None: every request reaches the
	// function, its path as the resource.
	Routes []string
}

// MatchRoute returns the route key of routes that an HTTP API selects for a request of method
// on path, and the path parameters it binds; ok is false if none matches. As API Gateway, it
// prefers the most specific route: segment by segment, a literal over a {variable} over a
// greedy {variable+}; a route of the method over one of ANY; $default last.
func MatchRoute(routes []string, method, path string) (key string, params map[string]string, ok bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	best, bestRank := -1, []int(nil)
	var bestParams map[string]string
	for i, rk := range routes {
		m, rpath, _ := strings.Cut(rk, " ")
		if rk == "$default" {
			if best < 0 {
				best, bestRank, bestParams = i, []int{-1}, nil
			}
			continue
		}
		if m != method && m != "ANY" {
			continue
		}
		rank, p, matched := matchSegments(strings.Split(strings.Trim(rpath, "/"), "/"), segs)
		if !matched {
			continue
		}
		rank = append(rank, map[bool]int{true: 1, false: 0}[m == method])
		if best < 0 || slices.Compare(rank, bestRank) > 0 {
			best, bestRank, bestParams = i, rank, p
		}
	}
	if best < 0 {
		return "", nil, false
	}
	return routes[best], bestParams, true
}

// matchSegments matches a route's path segments to a request's, and ranks the match: 2 for a
// literal segment, 1 for a variable, 0 for a greedy variable.
func matchSegments(route, segs []string) (rank []int, params map[string]string, ok bool) {
	params = map[string]string{}
	for i, r := range route {
		if strings.HasPrefix(r, "{") && strings.HasSuffix(r, "+}") { // greedy: the rest, at least one
			if i >= len(segs) {
				return nil, nil, false
			}
			params[strings.TrimSuffix(r[1:], "+}")] = strings.Join(segs[i:], "/")
			return append(rank, 0), params, true
		}
		if i >= len(segs) {
			return nil, nil, false
		}
		if strings.HasPrefix(r, "{") && strings.HasSuffix(r, "}") {
			if segs[i] == "" {
				return nil, nil, false
			}
			v, err := url.PathUnescape(segs[i])
			if err != nil {
				v = segs[i]
			}
			params[r[1:len(r)-1]] = v
			rank = append(rank, 1)
			continue
		}
		if r != segs[i] {
			return nil, nil, false
		}
		rank = append(rank, 2)
	}
	if len(route) != len(segs) {
		return nil, nil, false
	}
	return rank, params, true
}

func (g APIGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 10<<20))
	if err != nil {
		gatewayError(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	req := ProxyRequest(r, body)
	if len(g.Routes) > 0 {
		key, params, ok := MatchRoute(g.Routes, r.Method, r.URL.EscapedPath())
		if !ok {
			gatewayError(w, http.StatusNotFound, "Not Found")
			return
		}
		if _, path, found := strings.Cut(key, " "); found {
			req.Resource, req.RequestContext.ResourcePath = path, path
		} else {
			req.Resource, req.RequestContext.ResourcePath = key, key
		}
		if len(params) > 0 {
			req.PathParameters = params
		}
	}
	if g.Auth != nil { // after the route: API Gateway answers 404 to a path no route has
		if msg, ok := g.Auth.Verify(r, body); !ok {
			gatewayError(w, http.StatusForbidden, msg)
			return
		}
	}
	event, err := json.Marshal(req)
	if err != nil {
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	type result struct {
		out  []byte
		ferr *FunctionError
		err  error
	}
	done := make(chan result, 1)
	// Not r's context: a client that disconnects does not end the function's invocation.
	ictx := context.WithoutCancel(r.Context())
	go func() {
		out, ferr, err := g.Function.Invoke(ictx, event, time.Now().Add(g.Function.timeout()))
		done <- result{out, ferr, err}
	}()
	integration := time.NewTimer(cmp.Or(g.Timeout, IntegrationTimeout))
	defer integration.Stop()
	var res result
	select {
	case res = <-done:
	case <-integration.C:
		gatewayError(w, http.StatusServiceUnavailable, "Service Unavailable")
		return
	case <-r.Context().Done():
		return // the client is gone: the answer has nowhere to go
	}
	out := res.out
	if res.err != nil || res.ferr != nil {
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode == 0 {
		gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		w.Header()[http.CanonicalHeaderKey(k)] = vs
	}
	payload := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if payload, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
			return
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(payload)
}

func gatewayError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"message":%q}`, msg)
}

// SQSEvent is the event an SQS event source mapping sends for msgs, received from the queue
// whose ARN is arn, in region.
func SQSEvent(arn, region string, msgs []sqstypes.Message) events.SQSEvent {
	return eventsource.Event(arn, region, msgs)
}

// SQSHandler invokes f with each batch, for an eventsource.SQS (an emulated event source
// mapping): a function that fails, or runs out of time, fails the whole batch, as on AWS.
func SQSHandler(f *Function) eventsource.SQSHandler {
	return func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		out, err := invokeJSON(ctx, f, e)
		if err != nil {
			return resp, err
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			return resp, fmt.Errorf("%s answered %s, not a batch response: %w", f.name(), out, err)
		}
		return resp, nil
	}
}

// ScheduledHandler invokes f with each scheduled event, for an eventsource.Schedule.
func ScheduledHandler(f *Function) func(ctx context.Context, e events.EventBridgeEvent) error {
	return func(ctx context.Context, e events.EventBridgeEvent) error {
		_, err := invokeJSON(ctx, f, e)
		return err
	}
}

// invokeJSON invokes f with event, by ctx's deadline if it has one; a function error is an error.
func invokeJSON(ctx context.Context, f *Function, event any) ([]byte, error) {
	payload, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	out, ferr, err := f.Invoke(ctx, payload, deadline)
	if err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, errors.Join(fmt.Errorf("function %s failed", f.name()), ferr)
	}
	return out, nil
}
