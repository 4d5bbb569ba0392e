// Package eventbus puts lifecycle events on an Amazon EventBridge event bus with PutEvents: the
// lifecycle.Sink of AWS and of `atf dev --events eventbridge`.
package eventbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// Sink puts entries on one bus.
type Sink struct {
	client *eventbridge.Client
	bus    string
}

var _ lifecycle.Sink = (*Sink)(nil)

// New returns a sink putting events on bus (a name or ARN).
func New(client *eventbridge.Client, bus string) (*Sink, error) {
	if bus == "" {
		return nil, errors.New("eventbus: no event bus named")
	}
	return &Sink{client: client, bus: bus}, nil
}

// NewClient returns an EventBridge client of cfg. Its retryer retries throttles and server
// errors of a whole request; the publisher retries the entries a request reports failed.
func NewClient(cfg aws.Config, opts ...func(*eventbridge.Options)) *eventbridge.Client {
	return eventbridge.NewFromConfig(cfg, opts...)
}

// permanent are the entry error codes that putting the entry again cannot cure.
var permanent = map[string]bool{"InvalidArgument": true, "MalformedDetail": true, "AccessDeniedException": true}

// Put puts a batch with one PutEvents request and reports the entries it failed
// (FailedEntryCount): EventBridge may take some entries of a request and not others.
func (s *Sink) Put(ctx context.Context, batch []lifecycle.Entry) ([]lifecycle.Failure, error) {
	if len(batch) > lifecycle.MaxBatchEntries {
		return nil, fmt.Errorf("eventbus: %d entries, over PutEvents' %d", len(batch), lifecycle.MaxBatchEntries)
	}
	entries := make([]types.PutEventsRequestEntry, len(batch))
	for i, e := range batch {
		entries[i] = types.PutEventsRequestEntry{
			EventBusName: aws.String(s.bus),
			Source:       aws.String(lifecycle.Source),
			DetailType:   aws.String(e.DetailType),
			Detail:       aws.String(string(e.Detail)),
			Time:         aws.Time(e.Time),
		}
	}
	out, err := s.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("eventbus: PutEvents on %s: %w", s.bus, err)
	}
	if out.FailedEntryCount == 0 {
		return nil, nil
	}
	if len(out.Entries) != len(batch) {
		// The answer cannot say which failed: put them all again (consumers drop duplicates by
		// event_id).
		return nil, fmt.Errorf("eventbus: PutEvents on %s failed %d entries and answered %d results for %d", s.bus, out.FailedEntryCount, len(out.Entries), len(batch))
	}
	var failures []lifecycle.Failure
	for i, r := range out.Entries {
		if r.ErrorCode == nil {
			continue
		}
		code := aws.ToString(r.ErrorCode)
		failures = append(failures, lifecycle.Failure{Index: i, Code: code, Message: aws.ToString(r.ErrorMessage), Retriable: !permanent[code]})
	}
	return failures, nil
}
