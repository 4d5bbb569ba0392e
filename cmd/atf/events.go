package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/openatf/atf/shared/adapter/eventbus"
	"github.com/openatf/atf/shared/service/lifecycle"
)

// eventSink returns the sink of `atf dev --events MODE`: none for "", JSON lines on out for
// stdout, or PutEvents on bus for eventbridge, with the AWS SDK's standard environment (region,
// credentials, AWS_ENDPOINT_URL_EVENTBRIDGE for an emulator).
func eventSink(ctx context.Context, mode, bus string, out io.Writer) (lifecycle.Sink, error) {
	switch mode {
	case "":
		return nil, nil
	case "stdout":
		return lifecycle.NewWriterSink(out), nil
	case "eventbridge":
		if bus == "" {
			return nil, errors.New("--events eventbridge needs --event-bus NAME")
		}
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("AWS config: %w", err)
		}
		if cfg.Region == "" {
			return nil, errors.New("--events eventbridge: no AWS region: set AWS_REGION")
		}
		return eventbus.New(eventbus.NewClient(cfg), bus)
	}
	return nil, fmt.Errorf("--events must be stdout or eventbridge, got %q", mode)
}
