package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// hangingStore never answers a task call: it blocks until the call's context ends, as a store
// behind a dead connection does.
type hangingStore struct{ task.Store }

func (hangingStore) Create(ctx context.Context, _ task.Task) error { <-ctx.Done(); return ctx.Err() }
func (hangingStore) Get(ctx context.Context, _, _ string) (task.Task, error) {
	<-ctx.Done()
	return task.Task{}, ctx.Err()
}
func (hangingStore) GetState(ctx context.Context, _, _ string) (task.Task, error) {
	<-ctx.Done()
	return task.Task{}, ctx.Err()
}

// blackHole is a TCP endpoint that accepts connections and never answers.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// refused is an endpoint where nothing listens.
func refused(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// dynamoStoreAt is a DynamoDB store whose client, the store's own (dynamostore.NewClient), calls
// endpoint.
func dynamoStoreAt(t *testing.T, endpoint string) task.Store {
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
	st, err := dynamostore.New(dynamostore.NewClient(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = &endpoint }), dynamostore.Config{Table: "atf-test"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStoreUnavailable: a request the store cannot serve, whether it hangs or cannot be reached,
// answers 503 store_unavailable with a Retry-After once the request's store budget has passed,
// never a bare 500, never a hang, and without naming the store's endpoint.
func TestStoreUnavailable(t *testing.T) {
	sqlite, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sqlite.Close()
	lambdas := []task.Lambda{task.Lambda{Name: "echo"}.WithDefaults()}
	const budget = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		store task.Store
	}{
		{"a store that hangs", hangingStore{sqlite}},
		{"DynamoDB behind an endpoint that never answers", dynamoStoreAt(t, blackHole(t))},
		{"DynamoDB behind an endpoint that refuses", dynamoStoreAt(t, refused(t))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := frontend.New(tc.store, frontend.Config{Lambdas: task.FixedCatalog(lambdas), MaxWait: time.Second})
			h := checked(t, httpapi.New(svc, slog.New(slog.DiscardHandler), httpapi.WithStoreBudget(budget)))
			for _, req := range []*http.Request{
				httptest.NewRequest("POST", "/v1/lambdas/echo/tasks", strings.NewReader(`{"id":"a"}`)),
				httptest.NewRequest("GET", "/v1/lambdas/echo/tasks/a", nil),
				httptest.NewRequest("GET", "/v1/lambdas/echo/tasks/a?wait=100ms", nil),
			} {
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				answered := make(chan struct{})
				go func() {
					h.ServeHTTP(rec, req)
					close(answered)
				}()
				select {
				case <-answered:
				case <-time.After(budget + 10*time.Second): // far past the budget: it hangs
					t.Fatalf("%s %s: no answer %s after its budget", req.Method, req.URL, 10*time.Second)
				}
				var out map[string]any
				json.Unmarshal(rec.Body.Bytes(), &out)
				if rec.Code != http.StatusServiceUnavailable || errorCode(out) != "store_unavailable" || rec.Header().Get("Retry-After") == "" {
					t.Errorf("%s %s: %d %s Retry-After %q; want 503 store_unavailable with a Retry-After", req.Method, req.URL, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
				}
				if strings.Contains(rec.Body.String(), "127.0.0.1") {
					t.Errorf("%s %s: the answer names the store's endpoint: %s", req.Method, req.URL, rec.Body)
				}
			}
		})
	}
}
