package apifn_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// FuzzHandle feeds the API function arbitrary API Gateway proxy events, decoded as the Lambda
// runtime decodes them (an event that does not decode never reaches Handle), over the embedded
// store holding task evt-1 of lambda echo. A non-empty reqPath replaces the event's path, so
// paths are fuzzed directly too. Whatever the event:
//   - Handle never panics;
//   - unless Handle returns an error (a broken event: a body that is not base64 though flagged so,
//     a method or path that make no URL), the answer is not a 5xx, and its body, base64-decoded if
//     flagged, is one JSON value served as application/json; a 4xx is an error object.
func FuzzHandle(f *testing.F) {
	event := func(method, reqPath, query, body string, b64 bool) []byte {
		e := events.APIGatewayProxyRequest{HTTPMethod: method, Path: reqPath, Body: body, IsBase64Encoded: b64,
			RequestContext: events.APIGatewayProxyRequestContext{RequestID: "r1", DomainName: "abc123.execute-api.us-east-1.amazonaws.com"}}
		if query != "" {
			e.MultiValueQueryStringParameters = map[string][]string{"status": {query}, "limit": {"2"}}
		}
		out, _ := json.Marshal(e)
		return out
	}
	f.Add(event("POST", "/v1/lambdas/echo/tasks", "", base64.StdEncoding.EncodeToString([]byte(`{"id":"b64","payload":{"a":1}}`)), true), "")
	f.Add(event("POST", "/v1/lambdas/echo/tasks", "", "not base64!", true), "")
	f.Add(event("get", "/v1/lambdas/echo/tasks", "new", "", false), "")
	f.Add(event("GET", "/v1/lambdas/echo/tasks", "lost", "", false), "")
	f.Add(event("GET", "", "", "", false), "/v1/lambdas/echo/tasks/evt-1")
	f.Add(event("GET", "", "", "", false), "/v1/lambdas/echo/tasks/a%2Fb")
	f.Add(event("GET", "", "", "", false), "/v1/lambdas/echo/tasks/50%")
	f.Add(event("GET", "", "", "", false), "v1/lambdas")
	f.Add(event("BREW COFFEE", "/v1/lambdas", "", "", false), "")
	f.Add(event("PUT", "/v1/lambdas/echo/gate", "", `{"mode":"drop"}`, false), "")
	f.Add([]byte(`{"httpMethod":"POST","path":"/v1/lambdas/echo/tasks","body":null,"headers":null,"multiValueHeaders":{"Content-Type":[]}}`), "")
	f.Add([]byte(`{}`), "")

	store, err := sqlitestore.Open(filepath.Join(f.TempDir(), "atf.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	echo := task.Lambda{Name: "echo"}.WithDefaults()
	cfg := task.Config{PayloadLimit: 1 << 10}.WithDefaults()
	tk, err := task.New(task.Spec{ID: "evt-1", Payload: []byte(`{"n":1}`)}, echo, time.Now(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := store.Create(f.Context(), tk); err != nil {
		f.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	h := apifn.New(httpapi.New(frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{echo}, Task: cfg}), quiet), quiet)

	f.Fuzz(func(t *testing.T, event []byte, reqPath string) {
		var req events.APIGatewayProxyRequest
		if json.NewDecoder(bytes.NewReader(event)).Decode(&req) != nil {
			return // a function error: the runtime never calls Handle
		}
		if reqPath != "" {
			req.Path = reqPath
		}
		resp, err := h.Handle(t.Context(), req)
		if err != nil {
			return // a broken event: Lambda reports a function error, API Gateway a 502
		}
		if resp.StatusCode/100 == 3 {
			t.Fatalf("%s %s: a redirect (%d): the API answers in its own format", req.HTTPMethod, req.Path, resp.StatusCode)
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 500 {
			t.Fatalf("%s %s: status %d: %s", req.HTTPMethod, req.Path, resp.StatusCode, resp.Body)
		}
		body := []byte(resp.Body)
		if resp.IsBase64Encoded {
			if body, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
				t.Fatalf("a body flagged base64 is not: %v", err)
			}
		}
		if !json.Valid(body) {
			t.Fatalf("%s %s: status %d with a body that is not JSON: %q", req.HTTPMethod, req.Path, resp.StatusCode, body)
		}
		if ct := strings.Join(resp.MultiValueHeaders["Content-Type"], ",") + resp.Headers["Content-Type"]; ct != "application/json" {
			t.Fatalf("status %d with content type %q", resp.StatusCode, ct)
		}
		if resp.StatusCode >= 400 {
			var out struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&out); err != nil || out.Error.Code == "" || out.Error.Message == "" {
				t.Fatalf("status %d with a body that is not an error object: %s (%v)", resp.StatusCode, body, err)
			}
		}
	})
}
