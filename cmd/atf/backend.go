package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"

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
		if err := waitFor(ctx, "DynamoDB", log, func(ctx context.Context) error { return dynamostore.CreateTable(ctx, c.DB, b.Table) }); err != nil {
			return nil, nil, err
		}
		if err := waitFor(ctx, "SQS", log, func(ctx context.Context) error { return c.Queue.Create(ctx, lambdas...) }); err != nil {
			return nil, nil, err
		}
		return c.Store, c.Queue, nil
	}
	if err := waitFor(ctx, "DynamoDB", log, func(ctx context.Context) error {
		_, err := c.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(b.Table)})
		return err
	}); err != nil {
		var missing *types.ResourceNotFoundException
		if errors.As(err, &missing) {
			return nil, nil, fmt.Errorf("table %s does not exist: run atf dev with --create to create it and the queues", b.Table)
		}
		return nil, nil, fmt.Errorf("table %s: %w", b.Table, err)
	}
	return c.Store, c.Queue, nil
}

// Waiting for a backend at start: the first retry after backendRetryFirst, then twice as long
// each time up to backendRetryMax. An attempt is cut after backendAttempt, for an endpoint that
// accepts and never answers.
var (
	backendRetryFirst = time.Second
	backendRetryMax   = 10 * time.Second
	backendAttempt    = time.Minute
)

// waitFor calls fn until it succeeds or fails with something other than service being out of
// reach (such as a missing table), saying what it waits for each time: an emulator or a network
// that comes up after atf dev is no reason to exit. It stops at once when ctx ends (Ctrl-C).
func waitFor(ctx context.Context, service string, log *slog.Logger, fn func(context.Context) error) error {
	for wait := backendRetryFirst; ; wait = min(2*wait, backendRetryMax) {
		actx, cancel := context.WithTimeout(ctx, backendAttempt)
		err := fn(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			return err
		}
		log.Warn(fmt.Sprintf("waiting for %s at %s: %s; retrying in %s", service, endpointOf(service), cause(err), wait))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// unreachable reports an error that says the service could not be reached or did not answer:
// the request was not sent or its answer not read, a timeout, or a fault of the service (5xx).
func unreachable(err error) bool {
	var send *smithyhttp.RequestSendError
	var netErr net.Error
	var resp *smithyhttp.ResponseError
	return errors.As(err, &send) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &resp) && resp.HTTPStatusCode() >= 500)
}

// cause is the part of a network error a person acts on, such as "connection refused".
func cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	}
	return err.Error()
}

// endpointOf names where the SDK sends service's calls, as the AWS environment says.
func endpointOf(service string) string {
	return cmp.Or(os.Getenv("AWS_ENDPOINT_URL_"+strings.ToUpper(service)), os.Getenv("AWS_ENDPOINT_URL"), "its AWS endpoint")
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
