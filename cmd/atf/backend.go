package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/dynamostore"
	"github.com/openatf/atf/shared/sqsqueue"
	"github.com/openatf/atf/shared/task"
)

// awsBackend is where `atf dev --backend aws` keeps tasks and messages: a DynamoDB table and
// one SQS queue per lambda and priority, found through the standard AWS environment
// (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL, AWS_REGION, credentials).
type awsBackend struct {
	Table, Prefix string
	Shards        int
	Create        bool // create the table and queues when missing
}

func (b awsBackend) open(ctx context.Context, lambdas []task.Lambda, log *slog.Logger) (*dynamostore.Store, *sqsqueue.Queue, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, nil, errors.New("no AWS region: set AWS_REGION (with the emulators, any region works)")
	}
	db := dynamostore.NewClient(cfg, func(o *dynamodb.Options) {
		// Emulators send no CRC32 header on errors, and the SDK then warns about every failed
		// condition (aws/aws-sdk-go-v2#3545). AWS itself keeps the check.
		o.DisableValidateResponseChecksum = emulated("DYNAMODB")
	})
	store, err := dynamostore.New(db, dynamostore.Config{Table: b.Table, Shards: b.Shards})
	if err != nil {
		return nil, nil, err
	}
	queue, err := sqsqueue.New(sqs.NewFromConfig(cfg), sqsqueue.Config{Prefix: b.Prefix, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	if b.Create {
		if err := dynamostore.CreateTable(ctx, db, b.Table); err != nil {
			return nil, nil, err
		}
		if err := queue.Create(ctx, lambdas...); err != nil {
			return nil, nil, err
		}
		return store, queue, nil
	}
	if _, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(b.Table)}); err != nil {
		var missing *types.ResourceNotFoundException
		if errors.As(err, &missing) {
			return nil, nil, fmt.Errorf("table %s does not exist: run atf dev with --create to create it and the queues", b.Table)
		}
		return nil, nil, fmt.Errorf("table %s: %w", b.Table, err)
	}
	return store, queue, nil
}

// emulated reports whether the environment points service at another endpoint than AWS's own.
func emulated(service string) bool {
	return os.Getenv("AWS_ENDPOINT_URL_"+service) != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
}
