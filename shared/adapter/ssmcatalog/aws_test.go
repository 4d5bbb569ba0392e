package ssmcatalog_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ssmcatalog"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// pageCounter counts the calls of a client and the most parameters one returned.
type pageCounter struct {
	ssmcatalog.Client
	calls, most atomic.Int64
}

func (p *pageCounter) GetParametersByPath(ctx context.Context, in *ssm.GetParametersByPathInput, opts ...func(*ssm.Options)) (*ssm.GetParametersByPathOutput, error) {
	out, err := p.Client.GetParametersByPath(ctx, in, opts...)
	p.calls.Add(1)
	if err == nil && int64(len(out.Parameters)) > p.most.Load() {
		p.most.Store(int64(len(out.Parameters)))
	}
	return out, err
}

// TestSSM: on an SSM endpoint (moto), the catalog reads every parameter under its path, page by
// page, and none beside it.
func TestSSM(t *testing.T) {
	client := awstest.NewSSM(t)
	env := awstest.Name("catalog")
	var params, want []string
	for i := range 23 {
		name := fmt.Sprintf("l%02d", i)
		params = append(params, awsfn.LambdasPath(env)+fmt.Sprintf("team-%02d", i), `[{"name":"`+name+`","concurrency":3}]`)
		want = append(want, name)
	}
	params = append(params, "/atf/"+env+"/lambdas-not", `[{"name":"beside"}]`) // same prefix, another path
	awstest.PutParameters(t, client, params...)

	counter := &pageCounter{Client: client}
	cat, err := ssmcatalog.New(ssmcatalog.Config{Client: counter, Path: awsfn.LambdasPath(env), Parse: awsfn.ParseLambdas, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := cat.Lambdas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.Name)
		if l.Concurrency != 3 {
			t.Errorf("%s: concurrency %d, want 3", l.Name, l.Concurrency)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lambdas %v, want %v", got, want)
	}
	if c, most := counter.calls.Load(), counter.most.Load(); c != 3 || most != 10 {
		t.Errorf("%d calls returning at most %d parameters, want 3 pages of at most 10", c, most)
	}

	// The page size is SSM's own limit: the endpoint refuses more, so the pages above were its.
	_, err = client.GetParametersByPath(t.Context(), &ssm.GetParametersByPathInput{Path: aws.String("/atf/" + env + "/lambdas"), MaxResults: aws.Int32(11)})
	if err == nil {
		t.Error("MaxResults 11 accepted: the endpoint does not check SSM's page limit")
	}
}
