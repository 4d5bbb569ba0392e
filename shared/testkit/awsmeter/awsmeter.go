// Package awsmeter counts the AWS calls an SDK client makes: per service and operation, how many
// calls, HTTP attempts (retries included), errors, and the DynamoDB capacity units consumed where
// the response reports them (the store asks for them on every call). Tests use it to assert how
// many calls a path makes; benchmarks use it to price a task.
package awsmeter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Op names one API operation of one service, such as DynamoDB PutItem.
type Op struct{ Service, Operation string }

func (o Op) String() string { return o.Service + "." + o.Operation }

// Count is what the meter saw of one operation.
type Count struct {
	Calls    int     `json:"calls"`
	Attempts int     `json:"attempts"` // HTTP requests, retries included
	Errors   int     `json:"errors"`   // calls that failed after their retries
	Read     float64 `json:"read_units,omitempty"`
	Write    float64 `json:"write_units,omitempty"`
}

// Meter records calls. The zero value is ready; it is safe for concurrent use.
type Meter struct {
	mu     sync.Mutex
	counts map[Op]Count
}

// Attach makes every client built from cfg report to m.
func (m *Meter) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("awsmeter", m.handle), middleware.After)
	})
}

func (m *Meter) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleInitialize(ctx, in)
	op := Op{awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)}
	attempts := 1
	if r, ok := retry.GetAttemptResults(md); ok && len(r.Results) > 0 {
		attempts = len(r.Results)
	}
	read, write := capacity(out.Result)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[Op]Count{}
	}
	c := m.counts[op]
	c.Calls++
	c.Attempts += attempts
	if err != nil {
		c.Errors++
	}
	c.Read += read
	c.Write += write
	m.counts[op] = c
	return out, md, err
}

// Counts returns a copy of what was recorded.
func (m *Meter) Counts() map[Op]Count {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.counts)
}

// Calls returns how many calls of one operation were made.
func (m *Meter) Calls(service, operation string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[Op{service, operation}].Calls
}

// Reset forgets everything recorded.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts = nil
}

// String lists the operations in name order, one per line.
func (m *Meter) String() string {
	counts := m.Counts()
	ops := slices.SortedFunc(maps.Keys(counts), func(a, b Op) int { return strings.Compare(a.String(), b.String()) })
	var b strings.Builder
	for _, op := range ops {
		c := counts[op]
		fmt.Fprintf(&b, "%s calls=%d attempts=%d errors=%d", op, c.Calls, c.Attempts, c.Errors)
		if c.Read > 0 || c.Write > 0 {
			fmt.Fprintf(&b, " read=%.1f write=%.1f", c.Read, c.Write)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// capacity returns the read and write units a DynamoDB response reports, table and indexes
// together; zero for other services or when the response carries none.
func capacity(result any) (read, write float64) {
	var ccs []types.ConsumedCapacity
	switch r := result.(type) {
	case *dynamodb.GetItemOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		ccs = one(r.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		ccs = r.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		ccs = r.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		ccs = r.ConsumedCapacity
	case *dynamodb.TransactGetItemsOutput:
		ccs = r.ConsumedCapacity
	}
	for _, cc := range ccs {
		read += aws.ToFloat64(cc.ReadCapacityUnits)
		write += aws.ToFloat64(cc.WriteCapacityUnits)
		// Some servers report only the total; split it by the kind of call.
		if cc.ReadCapacityUnits == nil && cc.WriteCapacityUnits == nil {
			switch result.(type) {
			case *dynamodb.GetItemOutput, *dynamodb.QueryOutput, *dynamodb.ScanOutput, *dynamodb.BatchGetItemOutput, *dynamodb.TransactGetItemsOutput:
				read += aws.ToFloat64(cc.CapacityUnits)
			default:
				write += aws.ToFloat64(cc.CapacityUnits)
			}
		}
	}
	return read, write
}

func one(cc *types.ConsumedCapacity) []types.ConsumedCapacity {
	if cc == nil {
		return nil
	}
	return []types.ConsumedCapacity{*cc}
}
