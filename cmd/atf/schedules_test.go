package main

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestSchedulesCommand: atf schedules creates, shows (with the next five fire times), lists,
// pauses, resumes and deletes.
func TestSchedulesCommand(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(httpapi.New(svc, nil))
	t.Cleanup(srv.Close)
	atf := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(append(args, "--endpoint", srv.URL), &out); err != nil {
			t.Fatalf("atf %v: %v", args, err)
		}
		return out.String()
	}
	out := atf("schedules", "echo", "create", "--id", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--payload", `{"a":1}`, "--catch-up", "all")
	if !strings.Contains(out, "30 2 * * * (Europe/Berlin)") || strings.Count(out, "\n") < 14 {
		t.Fatalf("create:\n%s", out)
	}
	// An update: the zone alone, then a template field, merged into the template as stored; the
	// fire times print in the schedule's zone.
	if out := atf("schedules", "echo", "update", "nightly", "--tz", "UTC"); !strings.Contains(out, "30 2 * * * (UTC)") || !strings.Contains(out, "02:30:00 UTC") {
		t.Fatalf("update the zone:\n%s", out)
	}
	if out := atf("schedules", "echo", "update", "nightly", "--priority", "high", "--json"); !strings.Contains(out, `"priority": "high"`) || !strings.Contains(out, `"payload": {`) || !strings.Contains(out, `"revision": 3`) {
		t.Fatalf("update the priority:\n%s", out)
	}
	// --payload @FILE, as every command that takes --payload reads it.
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(`{"b": 2}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := atf("schedules", "echo", "update", "nightly", "--payload", "@"+file, "--json"); !strings.Contains(out, `"b": 2`) || !strings.Contains(out, `"priority": "high"`) {
		t.Fatalf("update the payload from a file:\n%s", out)
	}
	if err := run([]string{"schedules", "echo", "update", "nightly", "--rate", "1m", "--revision", "2", "--endpoint", srv.URL}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("update against a stale revision: %v, want 412", err)
	}
	atf("schedules", "echo", "create", "--id", "tick", "--rate", "5m")
	if out := atf("schedules", "echo"); !strings.Contains(out, "nightly") || !strings.Contains(out, "rate(5m)") {
		t.Fatalf("list:\n%s", out)
	}
	if out := atf("schedules", "echo", "pause", "tick"); !strings.Contains(out, "paused") {
		t.Fatalf("pause:\n%s", out)
	}
	if out := atf("schedules", "echo", "resume", "tick", "--json"); !strings.Contains(out, `"state": "active"`) || !strings.Contains(out, `"next_fires"`) {
		t.Fatalf("resume:\n%s", out)
	}
	atf("schedules", "echo", "delete", "tick")
	if err := run([]string{"schedules", "echo", "get", "tick", "--endpoint", srv.URL}, &bytes.Buffer{}); err == nil {
		t.Fatal("a deleted schedule is still there")
	}
	if err := run([]string{"schedules", "echo", "create", "--endpoint", srv.URL}, &bytes.Buffer{}); err == nil {
		t.Fatal("a schedule with neither cron nor rate was created")
	}
}
