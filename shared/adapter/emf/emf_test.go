package emf

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// lines decodes the JSON lines of out.
func lines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		got = append(got, v)
	}
	return got
}

// TestLines: each observation is one EMF document: the _aws directive names the namespace, the
// dimension sets and the metrics with their units, and the root holds every member they name.
func TestLines(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, "atf/test")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.now = func() time.Time { return at }

	r.Transitions("send-email", task.StatusProcessing, task.StatusDead, lifecycle.Dead, 1)
	r.Transitions("send-email", task.StatusNew, task.StatusEnqueued, "", 1) // no event: no line
	r.Delivery("send-email", 1500*time.Microsecond)
	r.HandlerRan("send-email", "fatal", 2*time.Second)
	r.Pass("send-email", 30*time.Millisecond, true)
	r.StoreError("Update", metrics.KindThrottled)

	got := lines(t, buf.String())
	want := []map[string]any{
		{"Lambda": "send-email", "Event": "dead", "TaskEvents": 1.0, "_aws": aws([]any{[]any{"Lambda", "Event"}}, "TaskEvents", "Count")},
		{"Lambda": "send-email", "DeliveryLatency": 1.5, "_aws": aws([]any{[]any{"Lambda"}}, "DeliveryLatency", "Milliseconds")},
		{"Lambda": "send-email", "Outcome": "fatal", "HandlerDuration": 2000.0, "_aws": aws([]any{[]any{"Lambda"}}, "HandlerDuration", "Milliseconds")},
		{"Lambda": "send-email", "SweepDuration": 30.0, "SweepErrors": 1.0,
			"_aws": aws([]any{[]any{"Lambda"}}, "SweepDuration", "Milliseconds", "SweepErrors", "Count")},
		{"Operation": "Update", "Kind": "throttled", "StoreErrors": 1.0, "_aws": aws([]any{[]any{}, []any{"Operation"}}, "StoreErrors", "Count")},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("line %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// aws is the _aws member of a line at the test's time, with name/unit pairs.
func aws(dims []any, nameUnits ...string) map[string]any {
	var defs []any
	for i := 0; i < len(nameUnits); i += 2 {
		defs = append(defs, map[string]any{"Name": nameUnits[i], "Unit": nameUnits[i+1]})
	}
	return map[string]any{
		"Timestamp": float64(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace": "atf/test", "Dimensions": dims, "Metrics": defs,
		}},
	}
}

// TestConcurrentLinesDoNotMix: lines written at once stay whole.
func TestConcurrentLinesDoNotMix(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, "atf/test")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				r.Delivery("l", time.Millisecond)
			}
		})
	}
	wg.Wait()
	if n := len(lines(t, buf.String())); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
}

// TestUnits: the units of an invocation's store calls count for their lambdas, with one
// invocation each; they are written at the end of an invocation, a line per lambda, at most once
// a UnitsEvery, so a busy function writes no line per task.
func TestUnits(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, "atf/test")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.now = func() time.Time { return at }

	r.Consumed("send-email", cost.Units{Write: 4})
	r.Consumed("send-email", cost.Units{Write: 4, Read: 1})
	r.Consumed("", cost.Units{Read: 1}) // the gates: no lambda's
	r.Invoked()
	got := lines(t, buf.String())
	want := map[string]any{"Lambda": "send-email", "WriteUnits": 8.0, "ReadUnits": 1.0, "Invocations": 1.0,
		"_aws": aws([]any{[]any{"Lambda"}}, "WriteUnits", "Count", "ReadUnits", "Count", "Invocations", "Count")}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("the first invocation wrote\n%s\nwant one line %v", buf.String(), want)
	}

	buf.Reset()
	for range 100 { // within the minute: added up, not written
		r.Consumed("send-email", cost.Units{Write: 3, Read: 1})
		r.Consumed("resize", cost.Units{Read: 0.5})
		r.Invoked()
	}
	r.Invoked() // an invocation of neither
	if buf.Len() != 0 {
		t.Fatalf("wrote within %s of the last line:\n%s", UnitsEvery, buf.String())
	}
	at = at.Add(UnitsEvery)
	r.Consumed("send-email", cost.Units{Write: 3, Read: 1})
	r.Invoked()
	got = lines(t, buf.String())
	if len(got) != 2 || got[0]["Lambda"] != "resize" || got[0]["ReadUnits"] != 50.0 || got[0]["Invocations"] != 100.0 ||
		got[1]["Lambda"] != "send-email" || got[1]["WriteUnits"] != 303.0 || got[1]["ReadUnits"] != 101.0 || got[1]["Invocations"] != 101.0 {
		t.Errorf("a minute later:\n%s\nwant resize 50 RRU in 100 invocations, send-email 303 WRU and 101 RRU in 101", buf.String())
	}

	// Claims held back by a limit are added up with the units, and written with them.
	buf.Reset()
	at = at.Add(UnitsEvery)
	r.Consumed("send-email", cost.Units{Read: 1})
	r.Held("send-email", "key_concurrency")
	r.Held("send-email", "rate")
	r.Invoked()
	got = lines(t, buf.String())
	if len(got) != 1 || got[0]["StartsHeld"] != 2.0 ||
		!reflect.DeepEqual(got[0]["_aws"].(map[string]any)["CloudWatchMetrics"], aws([]any{[]any{"Lambda"}}, "WriteUnits", "Count", "ReadUnits", "Count", "Invocations", "Count", "StartsHeld", "Count")["CloudWatchMetrics"]) {
		t.Errorf("with two claims held:\n%s\nwant StartsHeld 2 on the units line", buf.String())
	}
}
