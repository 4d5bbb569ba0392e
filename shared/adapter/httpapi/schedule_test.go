package httpapi_test

import (
	"net/http"
	"testing"
)

// TestSchedules: create (again: a replay; changed: a conflict), get with the next five fire
// times, list, pause, resume, delete.
func TestSchedules(t *testing.T) {
	srv := newServer(t)
	body := `{"id":"nightly","cron":"30 2 * * *","time_zone":"Europe/Berlin","task":{"payload":{"report":"daily"},"priority":"high","collection":"reports","max_attempts":3},"catch_up":"all","overlap":"skip"}`
	code, sc := call(t, srv, "POST", "/v1/lambdas/echo/schedules", body)
	if code != http.StatusCreated || sc["state"] != "active" || sc["catch_up"] != "all" {
		t.Fatalf("create: %d %v", code, sc)
	}
	if fires, _ := sc["next_fires"].([]any); len(fires) != 5 {
		t.Fatalf("next fires %v", sc["next_fires"])
	}
	if code, _ := call(t, srv, "POST", "/v1/lambdas/echo/schedules", body); code != http.StatusOK {
		t.Fatalf("replay: %d", code)
	}
	if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules", `{"id":"nightly","rate":"1h"}`); code != http.StatusConflict {
		t.Fatalf("id reused: %d %v", code, out)
	}
	for _, bad := range []string{`{"cron":"61 * * * *"}`, `{"rate":"2d"}`, `{"rate":"5124096h"}`, `{"rate":"1s","task":{"priority":"urgent"}}`, `{"rate":"1s","overlap":"queue"}`} {
		if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules", bad); code != 422 || errorCode(out) != "invalid" {
			t.Errorf("%s: %d %v", bad, code, out)
		}
	}
	if code, _ := call(t, srv, "POST", "/v1/lambdas/echo/schedules", `{"id":"tick","rate":"rate(2s)"}`); code != http.StatusCreated {
		t.Fatalf("rate: %d", code)
	}
	code, got := call(t, srv, "GET", "/v1/lambdas/echo/schedules/nightly", "")
	if code != http.StatusOK || got["cron"] != "30 2 * * *" || len(got["next_fires"].([]any)) != 5 {
		t.Fatalf("get: %d %v", code, got)
	}
	code, page := call(t, srv, "GET", "/v1/lambdas/echo/schedules?limit=1", "")
	if list, _ := page["schedules"].([]any); code != http.StatusOK || len(list) != 1 || page["next_cursor"] != "nightly" {
		t.Fatalf("list: %d %v", code, page)
	}
	code, page = call(t, srv, "GET", "/v1/lambdas/echo/schedules?limit=1&cursor=nightly", "")
	if list, _ := page["schedules"].([]any); code != http.StatusOK || len(list) != 1 || page["next_cursor"] != "" {
		t.Fatalf("list page 2: %d %v", code, page)
	}
	if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules/tick/pause", ""); code != http.StatusOK || out["state"] != "paused" {
		t.Fatalf("pause: %d %v", code, out)
	}
	if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules/tick/resume", ""); code != http.StatusOK || out["state"] != "active" {
		t.Fatalf("resume: %d %v", code, out)
	}
	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/lambdas/echo/schedules/tick", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if code, out := call(t, srv, "GET", "/v1/lambdas/echo/schedules/tick", ""); code != http.StatusNotFound {
		t.Fatalf("get deleted: %d %v", code, out)
	}
	if code, out := call(t, srv, "POST", "/v1/lambdas/nope/schedules", `{"rate":"1s"}`); code != http.StatusNotFound {
		t.Fatalf("unknown lambda: %d %v", code, out)
	}
}
