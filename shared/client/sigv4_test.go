package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// signedAPI is a fake atf API behind lambdaruntime.SigV4 (API Gateway's IAM authorization, in
// region eu-west-1, for the credentials known), and what reached it.
type signedAPI struct {
	*httptest.Server
	mu      sync.Mutex
	reached []string    // "METHOD PATH BODY" of each request let in
	busy    atomic.Bool // whether GET /v1/lambdas/busy/tasks/a answered its one 503
}

func newSignedAPI(t *testing.T, known ...aws.Credentials) *signedAPI {
	a := &signedAPI{}
	v := &lambdaruntime.SigV4{Region: "eu-west-1", Credentials: lambdaruntime.StaticCredentials(known...)}
	a.Server = httptest.NewServer(v.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.reached = append(a.reached, r.Method+" "+r.URL.Path+" "+string(body))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/lambdas/busy/tasks/a" && a.busy.CompareAndSwap(false, true):
			w.WriteHeader(http.StatusServiceUnavailable) // once: the client tries again
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"busy"}}`)
		case r.URL.Path == "/v1/lambdas":
			_, _ = io.WriteString(w, `{"lambdas":[{"name":"echo"}]}`)
		case r.URL.Path == "/v1/lambdas/echo/tasks" && r.Method == http.MethodGet:
			_, _ = io.WriteString(w, `{"tasks":[{"id":"a","lambda":"echo"}],"next_cursor":""}`)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"a","lambda":"echo","status":"new"}`)
		default:
			_, _ = io.WriteString(w, `{"id":"a","lambda":"echo","status":"new"}`)
		}
	})))
	t.Cleanup(a.Close)
	return a
}

func (a *signedAPI) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.reached...)
}

// rotating gives each Retrieve the next of creds, the last one again once they run out, and
// counts the calls.
type rotating struct {
	mu    sync.Mutex
	creds []aws.Credentials
	calls int
}

func (r *rotating) Retrieve(context.Context) (aws.Credentials, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.creds[min(r.calls, len(r.creds)-1)]
	r.calls++
	return c, nil
}

// TestClientSignsSigV4: with SigV4 set, every request (a schedule with its body, a get, a list
// with its query, the lambdas) carries a signature that API Gateway's check accepts, made with the
// credentials the provider gives for that request (they may change between requests: a refreshed
// session); no bearer token goes with it. A retry is signed anew.
func TestClientSignsSigV4(t *testing.T) {
	t.Parallel()
	first := aws.Credentials{AccessKeyID: "AKIDFIRST", SecretAccessKey: "s1"}
	second := aws.Credentials{AccessKeyID: "ASIASECOND", SecretAccessKey: "s2", SessionToken: "tok"}
	api := newSignedAPI(t, first, second)
	provider := &rotating{creds: []aws.Credentials{first, second}}
	c := &client.Client{Endpoint: api.URL, Token: "not-for-aws", SigV4: &aws.Config{Region: "eu-west-1", Credentials: provider}}
	ctx := t.Context()
	if _, _, err := c.Schedule(ctx, "echo", client.ScheduleRequest{ID: "a", Payload: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if _, err := c.Get(ctx, "echo", "a"); err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, _, err := c.List(ctx, task.ListParams{Lambda: "echo", Statuses: []task.Status{task.StatusNew}, Limit: 5}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if ls, err := c.Lambdas(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("lambdas: %v, %v", ls, err)
	}
	got := api.got()
	if len(got) != 4 || !strings.HasPrefix(got[0], `POST /v1/lambdas/echo/tasks {"id":"a","payload":{"n":1}}`) {
		t.Errorf("reached the API: %q; want the 4 requests, the schedule with its body", got)
	}
	if provider.calls != 4 {
		t.Errorf("the credentials were retrieved %d times for 4 requests; want once a request", provider.calls)
	}
	// A retry is signed again: its first try answered 503, the second went through.
	if _, err := c.Get(ctx, "busy", "a"); err != nil {
		t.Fatalf("get with a retry: %v", err)
	}
	if got := api.got(); len(got) != 6 || provider.calls != 6 {
		t.Errorf("a get retried once: %d requests reached the API, %d credential retrievals; want 6 and 6", len(got), provider.calls)
	}
}

// TestClientSigV4Errors: a request the client cannot sign fails before it is sent, at once and
// saying what to do: no region, no credentials, a provider that fails, credentials that expired. A 403 of API
// Gateway names the IAM action and the route refused, with the gateway's message.
func TestClientSigV4Errors(t *testing.T) {
	t.Parallel()
	good := aws.Credentials{AccessKeyID: "AKIDGOOD", SecretAccessKey: "good"}
	api := newSignedAPI(t, good)
	static := func(c aws.Credentials) aws.CredentialsProvider {
		return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return c, nil })
	}
	for _, tc := range []struct {
		name string
		cfg  *aws.Config
		want string
	}{
		{"no region", &aws.Config{Credentials: static(good)}, "no AWS region to sign the request for API Gateway with: set AWS_REGION"},
		{"no credentials", &aws.Config{Region: "eu-west-1"}, "no AWS credentials to sign the request for API Gateway with (execute-api:Invoke): set AWS_PROFILE"},
		{"provider fails", &aws.Config{Region: "eu-west-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{}, errors.New("failed to refresh cached credentials, no EC2 IMDS role found")
		})}, "no AWS credentials to sign the request for API Gateway with (execute-api:Invoke): set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run aws sso login: failed to refresh"},
		{"expired", &aws.Config{Region: "eu-west-1", Credentials: static(aws.Credentials{
			AccessKeyID: "ASIAOLD", SecretAccessKey: "x", SessionToken: "t", CanExpire: true, Expires: time.Now().Add(-time.Minute)})},
			"the AWS credentials of access key ASIAOLD expired at"},
		{"wrong secret", &aws.Config{Region: "eu-west-1", Credentials: static(aws.Credentials{AccessKeyID: "AKIDGOOD", SecretAccessKey: "bad"})},
			"API Gateway refused execute-api:Invoke on GET /v1/lambdas/echo/tasks/a: " + lambdaruntime.MsgSignatureMismatch},
		{"other region", &aws.Config{Region: "us-east-1", Credentials: static(good)},
			"API Gateway refused execute-api:Invoke on GET /v1/lambdas/echo/tasks/a: Credential should be scoped to a valid region."},
		{"unsigned", nil, "API Gateway refused execute-api:Invoke on GET /v1/lambdas/echo/tasks/a: Missing Authentication Token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(api.got())
			c := &client.Client{Endpoint: api.URL, SigV4: tc.cfg}
			_, err := c.Get(t.Context(), "echo", "a")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want an error with %q", err, tc.want)
			}
			var apiErr *client.Error
			if errors.As(err, &apiErr) && apiErr.Status != http.StatusForbidden {
				t.Errorf("status %d; want 403", apiErr.Status)
			}
			if len(api.got()) != before {
				t.Errorf("a request that was not signed rightly reached the API")
			}
		})
	}
	// A request that cannot be signed was not sent: it is not tried again (Lambdas is a request
	// safe to retry), the error comes at once.
	var calls atomic.Int32
	failing := &aws.Config{Region: "eu-west-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		calls.Add(1)
		return aws.Credentials{}, errors.New("no credentials in the chain")
	})}
	if _, err := (&client.Client{Endpoint: api.URL, SigV4: failing}).Lambdas(t.Context()); err == nil || calls.Load() != 1 {
		t.Errorf("a request without credentials: %v after %d tries; want the error after 1, not retried", err, calls.Load())
	}
}

// TestClientSigV4NoRedirect: a signed request is not sent on where a redirect points (net/http
// would send its session token and date there, to another host too): the redirect is the answer.
func TestClientSigV4NoRedirect(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.Header.Get("X-Amz-Security-Token") != "" {
			t.Errorf("the session token went on to %s", r.Host)
		}
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	creds := aws.Credentials{AccessKeyID: "ASIASESSION", SecretAccessKey: "s", SessionToken: "session-token"}
	c := &client.Client{Endpoint: redirecting.URL, SigV4: &aws.Config{Region: "eu-west-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil })}}
	_, err := c.Get(t.Context(), "echo", "a")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTemporaryRedirect {
		t.Errorf("got %v; want the 307 as the error", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed: %d requests elsewhere", n)
	}
}
