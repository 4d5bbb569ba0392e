package dynamostore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/cost"
)

// ReportConsumed is an option of NewClient that tells report, after each call that succeeded,
// the capacity units DynamoDB says it consumed, table and indexes together, with the call's
// context (which names the lambda it served: metrics.WithLambda). It asks for them
// (ReturnConsumedCapacity TOTAL) on every call that did not ask; they cost nothing more. A call
// that failed, a write whose condition failed among them, returns no figure and is not told,
// though DynamoDB bills it: the sums are a lower bound.
func ReportConsumed(report func(ctx context.Context, u cost.Units)) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("atf-consumed-capacity", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				askConsumed(in.Parameters)
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					if u := Consumed(out.Result); u != (cost.Units{}) {
						report(ctx, u)
					}
				}
				return out, md, err
			}), middleware.After)
		})
	}
}

// askConsumed sets ReturnConsumedCapacity TOTAL on a call's input that has it unset.
func askConsumed(params any) {
	total := types.ReturnConsumedCapacityTotal
	set := func(r *types.ReturnConsumedCapacity) {
		if *r == "" {
			*r = total
		}
	}
	switch p := params.(type) {
	case *dynamodb.GetItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.PutItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.UpdateItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.DeleteItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.QueryInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.ScanInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.BatchGetItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.BatchWriteItemInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.TransactWriteItemsInput:
		set(&p.ReturnConsumedCapacity)
	case *dynamodb.TransactGetItemsInput:
		set(&p.ReturnConsumedCapacity)
	}
}

// Consumed returns the units a DynamoDB call's output reports, table and indexes together;
// nothing for an output that reports none.
func Consumed(result any) cost.Units {
	var ccs []types.ConsumedCapacity
	read := false
	one := func(cc *types.ConsumedCapacity) {
		if cc != nil {
			ccs = append(ccs, *cc)
		}
	}
	switch r := result.(type) {
	case *dynamodb.GetItemOutput:
		one(r.ConsumedCapacity)
		read = true
	case *dynamodb.QueryOutput:
		one(r.ConsumedCapacity)
		read = true
	case *dynamodb.ScanOutput:
		one(r.ConsumedCapacity)
		read = true
	case *dynamodb.BatchGetItemOutput:
		ccs, read = r.ConsumedCapacity, true
	case *dynamodb.TransactGetItemsOutput:
		ccs, read = r.ConsumedCapacity, true
	case *dynamodb.PutItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.BatchWriteItemOutput:
		ccs = r.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		ccs = r.ConsumedCapacity
	}
	var u cost.Units
	for _, cc := range ccs {
		switch {
		case cc.ReadCapacityUnits != nil || cc.WriteCapacityUnits != nil:
			u.Read += aws.ToFloat64(cc.ReadCapacityUnits)
			u.Write += aws.ToFloat64(cc.WriteCapacityUnits)
		case read: // only the total: the kind of call tells which it is
			u.Read += aws.ToFloat64(cc.CapacityUnits)
		default:
			u.Write += aws.ToFloat64(cc.CapacityUnits)
		}
	}
	return u
}
