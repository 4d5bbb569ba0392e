package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// serverOver serves the API over store, for the echo lambda.
func serverOver(t *testing.T, store task.Store) *httptest.Server {
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	return srv
}

func openStore(t *testing.T) *sqlitestore.Store {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// raw sends a request and returns its status and body.
func raw(t *testing.T, srv *httptest.Server, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// payloadOf is a JSON string payload of n bytes, each of its characters c.
func payloadOf(c string, n int) string {
	return `"` + strings.Repeat(c, n-2) + `"`
}

// listAll pages through a list until its cursor ends. Every page must be within
// httpapi.ListPageBytes, unless it holds a single task; it returns the ids in order.
func listAll(t *testing.T, srv *httptest.Server, query string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the list never ends")
		}
		status, body := raw(t, srv, "GET", "/v1/lambdas/echo/tasks?"+query+"&cursor="+cursor, "")
		var page struct {
			Tasks []struct {
				ID string `json:"id"`
			} `json:"tasks"`
			NextCursor string `json:"next_cursor"`
		}
		if status != 200 || json.Unmarshal(body, &page) != nil {
			t.Fatalf("list %s: %d %.200s", query, status, body)
		}
		if len(body) > httpapi.ListPageBytes && len(page.Tasks) > 1 {
			t.Errorf("list %s: a page of %d tasks is %d bytes, over the %d-byte budget", query, len(page.Tasks), len(body), httpapi.ListPageBytes)
		}
		for _, tk := range page.Tasks {
			ids = append(ids, tk.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			return ids
		}
	}
}

// TestListPagesBoundedByBytes: a list of tasks with large payloads comes in pages within the
// byte budget, and paging reaches every task once, in order, with filters or without. A task
// larger than the budget comes alone. On AWS a larger page is past Lambda's response limit: a
// 502, and the pages after it out of reach.
func TestListPagesBoundedByBytes(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testListPagesBoundedByBytes(t, openStore(t)) })
	// The DynamoDB store merges its shards into a page: a shorter page must still be a prefix.
	t.Run("dynamodb", func(t *testing.T) {
		testListPagesBoundedByBytes(t, awstest.NewStore(t, "atf-httpapi", dynamostore.Config{}))
	})
}

func testListPagesBoundedByBytes(t *testing.T, store task.Store) {
	srv := serverOver(t, store)
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("t%02d", i)
		payload := payloadOf("x", 200<<10)
		if i%10 == 3 {
			payload = payloadOf("<", 256<<10) // sent as \u003c: about 1.5 MiB of JSON
		}
		body := fmt.Sprintf(`{"id":%q,"collection":"big","delay":"1h","payload":%s}`, id, payload)
		if status, b := raw(t, srv, "POST", "/v1/lambdas/echo/tasks", body); status != 201 {
			t.Fatalf("schedule %s: %d %.200s", id, status, b)
		}
		want = append(want, id)
	}
	for _, query := range []string{"limit=1000", "limit=1000&status=new", "limit=1000&status=new&collection=big", "limit=7"} {
		if got := listAll(t, srv, query); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("list %s reached %v, want %v", query, got, want)
		}
	}
}

// growingResults is a store whose tasks finish between two list calls: each call gives every
// task a larger result than the call before, so a page that was cut to the budget no longer fits
// when asked for again.
type growingResults struct {
	task.Store
	calls atomic.Int32
}

func (g *growingResults) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	tasks, next, err := g.Store.List(ctx, p)
	n := int(g.calls.Add(1))
	for i := range tasks {
		tasks[i].Result = json.RawMessage(payloadOf("r", min(n*50<<10, 256<<10)))
	}
	return tasks, next, err
}

// TestListPagesFitWhileTasksChange: a page asked for again to fit the budget may have grown
// meanwhile; the list still answers within the budget and reaches every task.
func TestListPagesFitWhileTasksChange(t *testing.T) {
	store := openStore(t)
	srv := serverOver(t, &growingResults{Store: store})
	var want []string
	for i := range 30 {
		id := fmt.Sprintf("t%02d", i)
		if status, b := raw(t, srv, "POST", "/v1/lambdas/echo/tasks", fmt.Sprintf(`{"id":%q,"delay":"1h","payload":%s}`, id, payloadOf("x", 150<<10))); status != 201 {
			t.Fatalf("schedule %s: %d %.200s", id, status, b)
		}
		want = append(want, id)
	}
	if got := listAll(t, srv, "limit=1000"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("list reached %v, want %v", got, want)
	}
}

// TestBatchBodyLimit: a batch body over httpapi.BatchBodyLimit is answered 413 naming the limit,
// and creates nothing, on atf dev as on AWS (where a larger body would not fit the function's
// event once escaped). The answer to a batch leaves out the payloads the caller sent.
func TestBatchBodyLimit(t *testing.T) {
	srv := serverOver(t, openStore(t))
	var tasks []string
	for i := range 14 { // 14 × 250 KiB: between the limit and the former 6 MiB
		tasks = append(tasks, fmt.Sprintf(`{"id":"b%02d","payload":%s}`, i, payloadOf("x", 250<<10)))
	}
	body := `{"tasks":[` + strings.Join(tasks, ",") + `]}`
	status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", body)
	e, _ := out["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if status != 413 || errorCode(out) != "too_large" || !strings.Contains(msg, fmt.Sprint(httpapi.BatchBodyLimit)) {
		t.Errorf("a batch body of %d bytes: %d %s %q; want 413 too_large naming the %d-byte limit", len(body), status, errorCode(out), msg, httpapi.BatchBodyLimit)
	}
	if status, _ := call(t, srv, "GET", "/v1/lambdas/echo/tasks/b00", ""); status != 404 {
		t.Errorf("a batch over the limit created its first task: %d", status)
	}
	body = `{"tasks":[` + strings.Join(tasks[:10], ",") + `]}`
	status, raw := raw(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", body)
	if status != 201 || len(raw) > 100<<10 || strings.Contains(string(raw), "xxxx") {
		t.Errorf("a batch of %d bytes: %d, an answer of %d bytes (%.200s); want 201 without the payloads", len(body), status, len(raw), raw)
	}
}
