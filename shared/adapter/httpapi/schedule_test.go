package httpapi_test

import (
	"net/http"
	"testing"
	"time"
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

// TestScheduleUpdate: PATCH with a new rate answers 200, and the next fire times follow the new
// rate; a stale revision answers 412, and an update with nothing to change or that does not
// validate 422. Fire times carry the schedule's zone, the stale next_fire is gone, and a paused
// schedule lists no next fires.
func TestScheduleUpdate(t *testing.T) {
	srv := newServer(t)
	if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules", `{"id":"tick","rate":"1h"}`); code != http.StatusCreated || out["revision"] != 1.0 {
		t.Fatalf("create: %d %v", code, out)
	}
	before := time.Now()
	code, sc := call(t, srv, "PATCH", "/v1/lambdas/echo/schedules/tick", `{"rate":"1m","revision":1}`)
	if code != http.StatusOK || sc["rate"] != "1m" || sc["revision"] != 2.0 {
		t.Fatalf("update: %d %v", code, sc)
	}
	fires := fireTimes(t, sc)
	if len(fires) != 5 || !fires[0].After(before.Truncate(time.Second)) || fires[0].After(time.Now().Add(time.Minute)) {
		t.Fatalf("next fires %v after an update at %s: want the first within a minute", fires, before)
	}
	for i := 1; i < len(fires); i++ {
		if d := fires[i].Sub(fires[i-1]); d != time.Minute {
			t.Fatalf("next fires %v: %s apart, want the new rate, 1m", fires, d)
		}
	}
	if _, ok := sc["next_fire"]; ok {
		t.Fatalf("the answer still has next_fire: %v", sc)
	}
	if code, out := call(t, srv, "PATCH", "/v1/lambdas/echo/schedules/tick", `{"rate":"5m","revision":1}`); code != http.StatusPreconditionFailed || errorCode(out) != "precondition_failed" {
		t.Fatalf("update from a stale revision: %d %v", code, out)
	}
	for _, bad := range []string{`{}`, `{"time_zone":"Europe/Berlin"}`, `{"rate":"2d"}`, `{"overlap":"queue"}`} {
		if code, out := call(t, srv, "PATCH", "/v1/lambdas/echo/schedules/tick", bad); code != 422 || errorCode(out) != "invalid" {
			t.Errorf("%s: %d %v", bad, code, out)
		}
	}
	if code, out := call(t, srv, "PATCH", "/v1/lambdas/echo/schedules/missing", `{"rate":"5m"}`); code != http.StatusNotFound {
		t.Fatalf("update a missing schedule: %d %v", code, out)
	}

	// To a cron in Berlin: its fire times are in Berlin's offset.
	code, sc = call(t, srv, "PATCH", "/v1/lambdas/echo/schedules/tick", `{"cron":"30 2 * * *","time_zone":"Europe/Berlin"}`)
	if code != http.StatusOK || sc["rate"] != nil || sc["revision"] != 3.0 {
		t.Fatalf("update to a cron: %d %v", code, sc)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fireTimes(t, sc) {
		_, offset := f.Zone()
		if _, want := f.In(berlin).Zone(); offset != want || f.Hour() != 2 || f.Minute() != 30 {
			t.Fatalf("next fire %s: want 02:30 with Berlin's offset", f.Format(time.RFC3339))
		}
	}
	if code, out := call(t, srv, "POST", "/v1/lambdas/echo/schedules/tick/pause", ""); code != http.StatusOK || out["next_fires"] != nil {
		t.Fatalf("pause: %d, next fires %v; want none", code, out["next_fires"])
	}
}

// fireTimes reads an answer's next_fires.
func fireTimes(t *testing.T, sc map[string]any) []time.Time {
	t.Helper()
	list, _ := sc["next_fires"].([]any)
	var out []time.Time
	for _, f := range list {
		at, err := time.Parse(time.RFC3339, f.(string))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, at)
	}
	return out
}
