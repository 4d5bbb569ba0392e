package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/awsfn"
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
	c, err := awsfn.Open(ctx, awsfn.Env{Table: b.Table, QueuePrefix: b.Prefix, Shards: b.Shards}, log)
	if err != nil {
		return nil, nil, err
	}
	if b.Create {
		if err := dynamostore.CreateTable(ctx, c.DB, b.Table); err != nil {
			return nil, nil, err
		}
		if err := c.Queue.Create(ctx, lambdas...); err != nil {
			return nil, nil, err
		}
		return c.Store, c.Queue, nil
	}
	if _, err := c.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(b.Table)}); err != nil {
		var missing *types.ResourceNotFoundException
		if errors.As(err, &missing) {
			return nil, nil, fmt.Errorf("table %s does not exist: run atf dev with --create to create it and the queues", b.Table)
		}
		return nil, nil, fmt.Errorf("table %s: %w", b.Table, err)
	}
	return c.Store, c.Queue, nil
}
