package dynamostore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// storeAt is a store whose client, the store's own, calls endpoint.
func storeAt(t *testing.T, endpoint string) *dynamostore.Store {
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
	return newStore(t, dynamostore.NewClient(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = &endpoint }), dynamostore.Config{Table: "atf-test"})
}

// TestUnavailable: a DynamoDB out of reach is task.ErrUnavailable, whether it refuses (after the
// SDK's retries, which fit in the API's 10 s store budget, httpapi.DefaultStoreBudget) or never
// answers (once the caller's deadline has passed).
func TestUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = storeAt(t, refused).Get(t.Context(), "echo", "a")
	if !errors.Is(err, task.ErrUnavailable) {
		t.Errorf("Get from a DynamoDB that refuses: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Get from a DynamoDB that refuses took %s, past the API's 10 s store budget", took)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, and never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := storeAt(t, "http://"+silent.Addr().String()).Get(ctx, "echo", "a"); !errors.Is(err, task.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get from a DynamoDB that never answers: %v, want ErrUnavailable, and the deadline as its cause", err)
	}
}
