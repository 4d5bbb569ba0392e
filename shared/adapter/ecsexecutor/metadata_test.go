package ecsexecutor_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ecsexecutor"
	"github.com/openatf/atf/shared/task"
)

// containerMetadata is a container's document from the task metadata endpoint v4 of a Fargate
// task whose container logs through awslogs, in the shape AWS documents it.
const containerMetadata = `{
    "DockerId": "cd189a933e5849daa93386466019ab50-2495160603",
    "Name": "executor",
    "DockerName": "executor",
    "Image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/cdk-hnb659fds-container-assets:3f1c",
    "ImageID": "sha256:9b1b0c3ca47f4b9e5d9b4d2ab2c1a8a0d3e2f1c0b9a8d7e6f5a4b3c2d1e0f9a8",
    "Labels": {
        "com.amazonaws.ecs.cluster": "arn:aws:ecs:eu-west-1:123456789012:cluster/atf-prod",
        "com.amazonaws.ecs.container-name": "executor",
        "com.amazonaws.ecs.task-arn": "arn:aws:ecs:eu-west-1:123456789012:task/atf-prod/cd189a933e5849daa93386466019ab50",
        "com.amazonaws.ecs.task-definition-family": "atfprodExecutorNapTask",
        "com.amazonaws.ecs.task-definition-version": "7"
    },
    "DesiredStatus": "RUNNING",
    "KnownStatus": "RUNNING",
    "Limits": {"CPU": 2, "Memory": 0},
    "CreatedAt": "2026-11-28T01:00:07.620912337Z",
    "StartedAt": "2026-11-28T01:00:08.062559351Z",
    "Type": "NORMAL",
    "LogDriver": "awslogs",
    "LogOptions": {
        "awslogs-group": "atf-prod-ExecutorNapLogs1A2B3C4D-x9Y8z7",
        "awslogs-region": "eu-west-1",
        "awslogs-stream": "nap/executor/cd189a933e5849daa93386466019ab50"
    },
    "ContainerARN": "arn:aws:ecs:eu-west-1:123456789012:container/atf-prod/cd189a933e5849daa93386466019ab50/0c2b5e1f-6f0e-4c5a-9d2e-3b7f1a2c4d5e",
    "Networks": [
        {
            "NetworkMode": "awsvpc",
            "IPv4Addresses": ["10.0.2.106"],
            "AttachmentIndex": 0,
            "MACAddress": "0a:de:f6:10:51:e5",
            "IPv4SubnetCIDRBlock": "10.0.2.0/24",
            "PrivateDNSName": "ip-10-0-2-106.eu-west-1.compute.internal",
            "SubnetGatewayIpv4Address": "10.0.2.1/24"
        }
    ],
    "Snapshotter": "overlayfs"
}`

// metadataServer serves body with code at the endpoint's path, as ECS does at
// ECS_CONTAINER_METADATA_URI_V4, and returns that URI.
func metadataServer(t *testing.T, code int, body string) string {
	t.Helper()
	const path = "/v4/cd189a933e5849daa93386466019ab50-2495160603"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + path
}

// TestLogLocation: the executor learns its log group and stream from the task metadata endpoint;
// without the endpoint, or when it fails or names no awslogs group, it learns none and says why.
func TestLogLocation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	got, err := ecsexecutor.LogLocation(ctx, http.DefaultClient, metadataServer(t, http.StatusOK, containerMetadata))
	want := &task.LogLocation{Group: "atf-prod-ExecutorNapLogs1A2B3C4D-x9Y8z7", Stream: "nap/executor/cd189a933e5849daa93386466019ab50"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name, uri string
		want      string // in the error
	}{
		{"absent", "", ecsexecutor.EnvMetadata + " is not set"},
		{"failing", metadataServer(t, http.StatusInternalServerError, `{"error":"internal"}`), "500"},
		{"unreachable", closed.URL + "/v4/x", "task metadata endpoint"},
		{"not JSON", metadataServer(t, http.StatusOK, "<html>"), "the container's metadata"},
		{"other log driver", metadataServer(t, http.StatusOK, strings.Replace(containerMetadata, `"awslogs"`, `"awsfirelens"`, 1)), "not awslogs"},
		{"no group", metadataServer(t, http.StatusOK, strings.Replace(containerMetadata, `"awslogs-group"`, `"awslogs-other"`, 1)), "no log group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ecsexecutor.LogLocation(ctx, http.DefaultClient, tc.uri)
			if got != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %+v, %v; want no location and an error that says %q", got, err, tc.want)
			}
		})
	}
}

// TestLoadMetadataURI: the executor takes the task metadata endpoint from the environment ECS
// sets.
func TestLoadMetadataURI(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "p", awsfn.EnvLambda: "nap", awsfn.EnvLambdas: `[{"name":"nap"}]`,
		ecsexecutor.EnvHandlers: handlersDir(t, map[string]string{"nap": "cat"}), ecsexecutor.EnvMetadata: "http://169.254.170.2/v4/abc",
	}
	cfg, err := ecsexecutor.Load(nil, getenv(env), io.Discard)
	if err != nil || cfg.MetadataURI != "http://169.254.170.2/v4/abc" {
		t.Fatalf("metadata URI %q, %v", cfg.MetadataURI, err)
	}
}
