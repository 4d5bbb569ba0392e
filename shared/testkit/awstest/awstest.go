// Package awstest gives integration tests an AWS SDK config for the emulators (DynamoDB Local and
// moto, started by `make emulators`), LocalStack, or any AWS endpoint, read from the standard SDK
// environment: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_EVENTBRIDGE,
// AWS_ENDPOINT_URL_SSM or AWS_ENDPOINT_URL, AWS_REGION and
// credentials.
//
// Without an endpoint the tests skip, saying why, unless ATF_AWS_TESTS=require, as `make test`
// sets it: then a missing endpoint fails the test, so the AWS suites can never be skipped there.
package awstest

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// Config returns the SDK config for a test of service ("DYNAMODB", "SQS", "EVENTBRIDGE" or
// "SSM"), or ends the test.
func Config(t testing.TB, service string) aws.Config {
	t.Helper()
	if os.Getenv("AWS_ENDPOINT_URL_"+service) == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		msg := "no AWS_ENDPOINT_URL_" + service + " or AWS_ENDPOINT_URL: start the emulators with `make emulators` and export what it prints"
		if os.Getenv("ATF_AWS_TESTS") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

// Name returns a resource name that no other test run uses: prefix, then random lowercase letters
// and digits.
func Name(prefix string) string { return prefix + "-" + strings.ToLower(rand.Text()[:10]) }

// Backend is a DynamoDB table and a set of SQS queues of one test, named Name.
type Backend struct {
	Name  string
	DB    *dynamodb.Client
	SQS   *sqs.Client
	Store *dynamostore.Store
	Queue *sqsqueue.Queue
}

// NewBackend creates a table and the queues of lambdas, named by prefix and random letters, on
// the endpoints of the environment, and deletes them when the test ends.
func NewBackend(t testing.TB, prefix string, lambdas ...task.Lambda) Backend {
	t.Helper()
	dbCfg, sqsCfg := Config(t, "DYNAMODB"), Config(t, "SQS")
	b := Backend{Name: Name(prefix), DB: NewDynamoDB(dbCfg), SQS: sqs.NewFromConfig(sqsCfg)}
	Cleanup(t, b.Name)
	if err := dynamostore.CreateTable(t.Context(), b.DB, b.Name); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.Store, err = dynamostore.New(b.DB, dynamostore.Config{Table: b.Name}); err != nil {
		t.Fatal(err)
	}
	if b.Queue, err = sqsqueue.New(b.SQS, sqsqueue.Config{Prefix: b.Name, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Queue.Create(t.Context(), lambdas...); err != nil {
		t.Fatal(err)
	}
	return b
}

// NewStore creates a table of DynamoDB Local named after prefix and returns a store over it,
// configured as cfg (its Table set here); the table is deleted when t ends.
func NewStore(t testing.TB, prefix string, cfg dynamostore.Config) *dynamostore.Store {
	db := NewDynamoDB(Config(t, "DYNAMODB"))
	cfg.Table = Name(prefix)
	if err := dynamostore.CreateTable(t.Context(), db, cfg.Table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dynamostore.DeleteTable(context.Background(), db, cfg.Table) })
	store, err := dynamostore.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// NewDynamoDB is the store's client for tests. DynamoDB Local sends no CRC32 header on errors,
// and the SDK then warns about every failed condition (aws/aws-sdk-go-v2#3545).
func NewDynamoDB(cfg aws.Config, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	noCRC := func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }
	return dynamostore.NewClient(cfg, append([]func(*dynamodb.Options){noCRC}, opts...)...)
}

// Cleanup deletes, when the test ends, the table called name and every queue whose name starts
// with it: what a test, or an atf dev it started, created under that name.
func Cleanup(t testing.TB, name string) {
	dbCfg, sqsCfg := Config(t, "DYNAMODB"), Config(t, "SQS")
	t.Cleanup(func() {
		ctx := context.Background()
		_ = dynamostore.DeleteTable(ctx, dynamodb.NewFromConfig(dbCfg), name) // best effort, as is the rest
		q := sqs.NewFromConfig(sqsCfg)
		if out, err := q.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: &name}); err == nil {
			for _, url := range out.QueueUrls {
				_, _ = q.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
			}
		}
	})
}

// NewSSM returns an SSM Parameter Store client on the endpoint of the environment
// (AWS_ENDPOINT_URL_SSM), or ends the test.
func NewSSM(t testing.TB) *ssm.Client { return ssm.NewFromConfig(Config(t, "SSM")) }

// PutParameters writes String parameters (name, value, name, value...), overwriting any, and
// deletes them when the test ends.
func PutParameters(t testing.TB, c *ssm.Client, params ...string) {
	t.Helper()
	for i := 0; i+1 < len(params); i += 2 {
		name := params[i]
		if _, err := c.PutParameter(t.Context(), &ssm.PutParameterInput{Name: &name, Value: &params[i+1], Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = c.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: &name})
		})
	}
}
