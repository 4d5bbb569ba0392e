package apifn_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/task"
)

// lambdaPayloadLimit is what a Lambda invocation's request and its response may each hold: "6
// MB", taken as 6 MiB (Lambda's own error names 6,291,556 bytes).
const lambdaPayloadLimit = 6 << 20

// gatewayEvent is the event API Gateway sends for a request, with as many header bytes as it
// lets through (10 KiB), twice: as headers and as multi-value headers.
func gatewayEvent(method, path string, query url.Values, body string) events.APIGatewayProxyRequest {
	ev := events.APIGatewayProxyRequest{
		HTTPMethod: method, Path: path, Body: body,
		Headers: map[string]string{}, MultiValueHeaders: map[string][]string{},
		QueryStringParameters: map[string]string{}, MultiValueQueryStringParameters: query,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: "c6af9ac6-7b61-11e6-9a41-93e8deadbeef", Stage: "prod", HTTPMethod: method, Path: "/prod" + path,
			Identity: events.APIGatewayRequestIdentity{
				UserArn: "arn:aws:sts::123456789012:assumed-role/scheduler/session", AccountID: "123456789012", SourceIP: "203.0.113.7",
			},
		},
	}
	for i := range 10 {
		k, v := fmt.Sprintf("X-Header-%d", i), strings.Repeat(`"`, 1000)
		ev.Headers[k], ev.MultiValueHeaders[k] = v, []string{v}
	}
	if body != "" {
		ev.Headers["Content-Type"], ev.MultiValueHeaders["Content-Type"] = "application/json", []string{"application/json"}
	}
	for k, v := range query {
		ev.QueryStringParameters[k] = v[0]
	}
	return ev
}

// invokeSize is the size of v as the Lambda runtime encodes it (without HTML escapes).
func invokeSize(t *testing.T, v any) int {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Len()
}

// batchOf is a batch body of exactly size bytes whose payloads are JSON strings of c (padded
// with spaces), each within the payload limit.
func batchOf(t *testing.T, c string, size int) string {
	t.Helper()
	const each = 250 << 10
	const suffix = `]}`
	var b strings.Builder
	b.WriteString(`{"tasks":[`)
	for i := 0; ; i++ {
		head, tail := fmt.Sprintf(`{"id":"b%03d","payload":"`, i), `"}`
		if i > 0 {
			head = "," + head
		}
		room := size - b.Len() - len(head) - len(tail) - len(suffix)
		if room < 0 {
			t.Fatalf("cannot fill a batch of %d bytes", size)
		}
		n := each
		if room <= each+64 {
			n = room // the last task takes the rest
		}
		k := n / len(c)
		b.WriteString(head + strings.Repeat(c, k) + strings.Repeat(" ", n-k*len(c)) + tail)
		if n == room {
			break
		}
	}
	b.WriteString(suffix)
	if b.Len() != size {
		t.Fatalf("batch body of %d bytes, want %d", b.Len(), size)
	}
	return b.String()
}

// TestBatchFitsLambda: a batch body at the limit, of the characters that grow the most, fits
// in the API function's event once escaped into it, and its answer fits in the function's
// response; a body over the limit is answered 413 and creates nothing.
func TestBatchFitsLambda(t *testing.T) {
	for _, c := range []string{`\"`, `<`} {
		t.Run(c, func(t *testing.T) {
			store, h := newHandler(t)
			body := batchOf(t, c, httpapi.BatchBodyLimit)
			ev := gatewayEvent("POST", "/v1/lambdas/echo/tasks/batch", nil, body)
			if n := invokeSize(t, ev); n > lambdaPayloadLimit {
				t.Errorf("a batch body of %d bytes makes an event of %d bytes, over Lambda's %d", len(body), n, lambdaPayloadLimit)
			}
			resp, err := h.Handle(t.Context(), ev)
			if err != nil || resp.StatusCode != 201 {
				t.Fatalf("batch at the limit: %v, %d %.300s", err, resp.StatusCode, resp.Body)
			}
			if n := invokeSize(t, resp); n > lambdaPayloadLimit {
				t.Errorf("the answer to a batch body of %d bytes is %d bytes, over Lambda's %d", len(body), n, lambdaPayloadLimit)
			}
			if _, err := store.Get(t.Context(), "echo", "b000"); err != nil {
				t.Errorf("the batch's first task: %v", err)
			}
		})
	}
	store, h := newHandler(t)
	over := batchOf(t, "x", httpapi.BatchBodyLimit+1)
	resp, err := h.Handle(t.Context(), gatewayEvent("POST", "/v1/lambdas/echo/tasks/batch", nil, over))
	if err != nil || resp.StatusCode != 413 || !strings.Contains(resp.Body, fmt.Sprint(httpapi.BatchBodyLimit)) {
		t.Errorf("a batch body over the limit: %v, %d %.300s; want 413 naming the limit", err, resp.StatusCode, resp.Body)
	}
	if _, err := store.Get(t.Context(), "echo", "b000"); err == nil {
		t.Errorf("a batch over the limit created its first task")
	}
}

// TestListFitsLambda: pages of large tasks, listed through the API function, each fit in its
// response, and the pages reach every task.
func TestListFitsLambda(t *testing.T) {
	store, h := newHandler(t)
	echo := task.Lambda{Name: "echo"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	want := []string{"evt-1"}
	for i := range 30 {
		c := "x"
		if i%5 == 0 {
			c = `\"` // the character that grows the most in the response
		}
		payload := json.RawMessage(`"` + strings.Repeat(c, 250<<10/len(c)) + `"`)
		tk, err := task.New(task.Spec{ID: fmt.Sprintf("t%02d", i), Payload: payload}, echo, time.Now().Add(time.Duration(i+1)*time.Millisecond), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Create(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
		want = append(want, tk.ID)
	}
	var got []string
	cursor := ""
	for pages := 0; pages < 100; pages++ {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		resp, err := h.Handle(t.Context(), gatewayEvent("GET", "/v1/lambdas/echo/tasks", q, ""))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("list: %v, %d %.300s", err, resp.StatusCode, resp.Body)
		}
		if n := invokeSize(t, resp); n > lambdaPayloadLimit {
			t.Errorf("a list page's response is %d bytes, over Lambda's %d", n, lambdaPayloadLimit)
		}
		var page struct {
			Tasks []struct {
				ID string `json:"id"`
			} `json:"tasks"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &page); err != nil {
			t.Fatal(err)
		}
		for _, tk := range page.Tasks {
			got = append(got, tk.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the pages reached %v, want %v", got, want)
	}
}
