package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// awsBackend is where `atf dev --backend aws` keeps tasks and messages: a DynamoDB table and
// one SQS queue per lambda and priority, found through the standard AWS environment
// (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL, AWS_REGION, credentials).
type awsBackend struct {
	Table, Prefix string
	Shards        int
	Create        bool // create the table and queues when missing

	sqs *sqs.Client // set by open
}

func (b *awsBackend) open(ctx context.Context, lambdas []task.Lambda, log *slog.Logger) (*dynamostore.Store, *sqsqueue.Queue, error) {
	c, err := awsfn.Open(ctx, awsfn.Env{Table: b.Table, QueuePrefix: b.Prefix, Shards: b.Shards}, log)
	if err != nil {
		return nil, nil, err
	}
	b.sqs = sqs.NewFromConfig(c.AWS)
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

// create is `atf create`: the table and queues that `atf dev --backend aws` and the functions use.
func create(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atf create", flag.ContinueOnError)
	handlers := fs.String("handlers", "", "folder of executable handlers, one lambda per file")
	table := fs.String("table", "atf-dev", "DynamoDB table")
	prefix := fs.String("queue-prefix", "atf-dev", "SQS queue name prefix")
	asJSON := fs.Bool("json", false, "print JSON")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *handlers == "" {
		return fmt.Errorf("create takes --handlers DIR and no arguments")
	}
	lambdas, err := local.Config{HandlersDir: *handlers}.Lambdas()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b := awsBackend{Table: *table, Prefix: *prefix, Create: true}
	if _, _, err := b.open(context.Background(), lambdas, log); err != nil {
		return err
	}
	if *asJSON {
		type created struct {
			Lambda string   `json:"lambda"`
			Queues []string `json:"queues"`
		}
		v := struct {
			Table   string    `json:"table"`
			Lambdas []created `json:"lambdas"`
		}{Table: *table}
		for _, l := range lambdas {
			c := created{Lambda: l.Name}
			for _, p := range l.Priorities {
				c.Queues = append(c.Queues, *prefix+"-"+l.Name+"-"+p)
			}
			v.Lambdas = append(v.Lambdas, c)
		}
		return printJSON(out, v)
	}
	for _, l := range lambdas {
		fmt.Fprintf(out, "lambda %s: queues %s-%s-{%s}\n", l.Name, *prefix, l.Name, strings.Join(l.Priorities, ","))
	}
	fmt.Fprintf(out, "table %s\n", *table)
	return nil
}
