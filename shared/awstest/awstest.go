// Package awstest gives integration tests an AWS SDK config for the emulators (DynamoDB Local and
// moto, started by `make emulators`), LocalStack, or any AWS endpoint, read from the standard SDK
// environment: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL, AWS_REGION and
// credentials.
//
// Without an endpoint the tests skip, saying why, unless ATF_AWS_TESTS=require, as `make test`
// sets it: then a missing endpoint fails the test, so the AWS suites can never be skipped there.
package awstest

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Config returns the SDK config for a test of service ("DYNAMODB" or "SQS"), or ends the test.
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
