package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// An answer that carries stored tasks is at most answerFactor × their stored payloads and results
// plus answerOverhead per task (its other fields) and answerOverhead for the answer itself.
const (
	answerFactor   = 1
	answerOverhead = 1 << 10
)

func newHandler(t *testing.T) (http.Handler, task.Store) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	return checked(t, httpapi.New(svc, slog.New(slog.DiscardHandler))), store
}

// nestedPayload nests depth arrays and objects around inner.
func nestedPayload(depth int, inner string) string {
	return strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + inner + strings.Repeat("]", depth%2) + strings.Repeat(`]}`, depth/2)
}

// TestAnswersBoundedByStored: a task with a payload of the largest size and nesting the API
// accepts is answered, by schedule, get, list and cancel, in about the bytes it is stored in.
// Indented answers grew with the square of the nesting, and HTML-escaped ones up to six times the
// payload's size.
func TestAnswersBoundedByStored(t *testing.T) {
	deep := nestedPayload(task.MaxPayloadDepth, `"x"`)
	filler := strings.Repeat("<>&\u2028", (task.DefaultPayloadLimit-len(deep)-64)/6)
	for id, payload := range map[string]string{
		"deep":  deep,
		"large": nestedPayload(task.MaxPayloadDepth, `"`+filler+`"`),
	} {
		h, store := newHandler(t) // a store of its own, so the list answers this task only
		body := `{"id":"` + id + `","delay":"1h","payload":` + payload + `}`
		rec := serve(h, "POST", "/v1/lambdas/echo/tasks", []byte(body))
		if rec.Code != http.StatusCreated {
			t.Fatalf("schedule %s: %d %.200s", id, rec.Code, rec.Body)
		}
		stored, err := store.Get(context.Background(), "echo", id)
		if err != nil {
			t.Fatal(err)
		}
		bound := answerFactor*(len(stored.Payload)+len(stored.Result)) + 2*answerOverhead
		if rec.Body.Len() > bound {
			t.Errorf("schedule %s: %d bytes answered for %d stored", id, rec.Body.Len(), len(stored.Payload))
		}
		for _, call := range []struct{ method, path string }{
			{"GET", "/v1/lambdas/echo/tasks/" + id},
			{"GET", "/v1/lambdas/echo/tasks?limit=1&cursor="},
			{"POST", "/v1/lambdas/echo/tasks/" + id + "/cancel"},
		} {
			rec := serve(h, call.method, call.path, nil)
			if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: %d %.200s", call.method, call.path, rec.Code, rec.Body)
			}
			if rec.Body.Len() > bound {
				t.Errorf("%s %s: %d bytes answered for a task of %d stored", call.method, call.path, rec.Body.Len(), len(stored.Payload))
			}
		}
	}
}

// TestPayloadNestingLimit: a payload nested deeper than task.MaxPayloadDepth is refused with 422
// and not stored, in a schedule and in a batch.
func TestPayloadNestingLimit(t *testing.T) {
	h, store := newHandler(t)
	deep := nestedPayload(task.MaxPayloadDepth+1, `1`)
	for path, body := range map[string]string{
		"/v1/lambdas/echo/tasks":       `{"id":"deep","payload":` + deep + `}`,
		"/v1/lambdas/echo/tasks/batch": `{"tasks":[{"id":"ok"},{"id":"deep","payload":` + deep + `}]}`,
	} {
		rec := serve(h, "POST", path, []byte(body))
		if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "levels deep") {
			t.Errorf("%s with a payload %d deep: %d %s", path, task.MaxPayloadDepth+1, rec.Code, rec.Body)
		}
	}
	if counts, err := store.Counts(context.Background(), "echo"); err != nil || len(counts) != 0 {
		t.Errorf("refused payloads left tasks: %v %v", counts, err)
	}
}

// TestInvalidUTF8Refused: a body that is not valid UTF-8 is refused with 400 wherever the bad
// bytes are, and nothing is stored: a payload is kept as raw bytes, so it would be served back
// raw, as an answer that is not JSON.
func TestInvalidUTF8Refused(t *testing.T) {
	h, store := newHandler(t)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/lambdas/echo/tasks", "{\"id\":\"a\",\"payload\":\"\xff\xfe\"}"},
		{"POST", "/v1/lambdas/echo/tasks", "{\"id\":\"b\",\"payload\":{\"k\xc3\":1}}"},
		{"POST", "/v1/lambdas/echo/tasks", "{\"id\":\"c\xed\xa0\x80\"}"},
		{"POST", "/v1/lambdas/echo/tasks/batch", "{\"tasks\":[{\"id\":\"d\",\"payload\":[\"\xc0\xaf\"]}]}"},
		{"PUT", "/v1/lambdas/echo/gate", "{\"mode\":\"pause\",\"collection\":\"\xff\"}"},
	} {
		rec := serve(h, tc.method, tc.path, []byte(tc.body))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "UTF-8") || !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s %s %q: %d %s", tc.method, tc.path, tc.body, rec.Code, rec.Body)
		}
	}
	if counts, err := store.Counts(context.Background(), "echo"); err != nil || len(counts) != 0 {
		t.Errorf("refused bodies left tasks: %v %v", counts, err)
	}
	if gates, err := store.Gates(context.Background()); err != nil || len(gates) != 0 {
		t.Errorf("refused bodies left gates: %v %v", gates, err)
	}
}

// TestErrorsEchoBoundedInput: an error quotes at most task.MaxEchoBytes of each input it names,
// whatever its size: ids, names, query values, fields, paths and methods.
func TestErrorsEchoBoundedInput(t *testing.T) {
	h, _ := newHandler(t)
	word := strings.Repeat("w", 8<<10) // under every body limit
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/lambdas/echo/tasks/" + word, ""},
		{"POST", "/v1/lambdas/echo/tasks/" + word + "/cancel", ""},
		{"GET", "/v1/lambdas/" + word + "/tasks", ""},
		{"GET", "/v1/lambdas/echo/tasks?cursor=" + word, ""},
		{"GET", "/v1/lambdas/echo/tasks?status=" + word, ""},
		{"GET", "/v1/lambdas/echo/tasks?limit=" + word, ""},
		{"GET", "/v2/" + word, ""},
		{"POST", "/v1/lambdas/echo/tasks", `{"id":"` + word + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"id":"` + strings.Repeat(`\u0001\u00ff`, 1<<10) + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"priority":"` + word + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"collection":"` + word + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"delay":"` + word + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"run_at":"` + word + `"}`},
		{"POST", "/v1/lambdas/echo/tasks", `{"` + word + `":1}`},
		{"PUT", "/v1/lambdas/echo/gate", `{"mode":"` + word + `"}`},
	} {
		rec := serve(h, tc.method, tc.path, []byte(tc.body))
		if rec.Code < 400 || rec.Code >= 500 || !json.Valid(rec.Body.Bytes()) || !utf8.Valid(rec.Body.Bytes()) {
			t.Errorf("%s %.40s %.40s: %d %.200s", tc.method, tc.path, tc.body, rec.Code, rec.Body)
		}
		if rec.Body.Len() > 1<<10 {
			t.Errorf("%s %.40s %.40s: an error of %d bytes: %.300s", tc.method, tc.path, tc.body, rec.Body.Len(), rec.Body)
		}
	}
}
