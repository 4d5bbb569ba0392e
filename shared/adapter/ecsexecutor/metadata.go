package ecsexecutor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/openatf/atf/shared/task"
)

// EnvMetadata locates the task metadata endpoint (version 4) that ECS gives every container:
// a GET of it answers the container's metadata, its log driver and options among them.
const EnvMetadata = "ECS_CONTAINER_METADATA_URI_V4"

// metadataTimeout bounds the read of the container's metadata at start. The endpoint is local to
// the task and answers at once; a slow one must not hold the executor back.
const metadataTimeout = 5 * time.Second

// maxMetadata bounds the container's metadata document read: it is a few KB.
const maxMetadata = 1 << 20

// containerMetadata is what the executor reads of the endpoint's container document.
type containerMetadata struct {
	LogDriver  string            `json:"LogDriver"`
	LogOptions map[string]string `json:"LogOptions"`
}

// LogLocation reads where this container's logs are in CloudWatch Logs from the task metadata
// endpoint at uri (EnvMetadata's value): the awslogs driver's group and stream. It returns an
// error saying why if uri is empty (not on ECS), the endpoint fails or answers in time no
// document, or the container does not log to CloudWatch Logs.
func LogLocation(ctx context.Context, client *http.Client, uri string) (*task.LogLocation, error) {
	if uri == "" {
		return nil, fmt.Errorf("%s is not set: not on ECS", EnvMetadata)
	}
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, fmt.Errorf("task metadata endpoint %s: %w", uri, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("task metadata endpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("task metadata endpoint %s answered %s", uri, resp.Status)
	}
	var md containerMetadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadata)).Decode(&md); err != nil {
		return nil, fmt.Errorf("task metadata endpoint %s: the container's metadata: %w", uri, err)
	}
	if md.LogDriver != "awslogs" {
		return nil, fmt.Errorf("the container logs through %q, not awslogs (CloudWatch Logs)", md.LogDriver)
	}
	l := (&task.LogLocation{Group: md.LogOptions["awslogs-group"], Stream: md.LogOptions["awslogs-stream"]}).Bounded()
	if l == nil {
		return nil, errors.New("the container's awslogs options name no log group")
	}
	return l, nil
}
