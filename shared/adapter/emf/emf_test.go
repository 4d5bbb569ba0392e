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

// TestHeldUntilInvoked: once a process ends invocations, the task path's observations of each are
// written at its end, summed (events) or as value arrays of at most MaxValues (latencies,
// durations), a line per lambda and dimension; before the first end, and in a process that ends
// none, each is written at once.
func TestHeldUntilInvoked(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, "atf/test")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.now = func() time.Time { return at }

	r.Delivery("echo", time.Millisecond) // no invocation has ended yet: written at once
	r.Held("echo", "rate")               // as in an ECS executor, which ends none
	if got := lines(t, buf.String()); len(got) != 2 || got[0]["DeliveryLatency"] != 1.0 || got[1]["StartsHeld"] != 1.0 {
		t.Fatalf("before the first invocation's end:\n%s\nwant the lines at once", buf.String())
	}
	r.Invoked()
	buf.Reset()

	for i := range 150 {
		r.Transitions("echo", task.StatusEnqueued, task.StatusProcessing, lifecycle.Started, 1)
		r.Transitions("echo", task.StatusProcessing, task.StatusSuccess, lifecycle.Succeeded, 1)
		r.Delivery("echo", time.Duration(i)*time.Millisecond)
		r.HandlerRan("echo", "success", 2*time.Millisecond)
	}
	r.HandlerRan("echo", "fatal", 3*time.Millisecond)
	if buf.Len() != 0 {
		t.Fatalf("wrote within the invocation:\n%s", buf.String())
	}
	r.Transitions("resize", task.StatusProcessing, task.StatusDead, lifecycle.Dead, 2) // rare, alarmed on: at once
	if got := lines(t, buf.String()); len(got) != 1 || got[0]["Event"] != "dead" || got[0]["TaskEvents"] != 2.0 {
		t.Fatalf("a dead event was not written at once:\n%s", buf.String())
	}
	r.Invoked()
	got := lines(t, buf.String())
	type line struct{ lambda, dim, metric string }
	seen := map[line][]any{}
	for _, l := range got {
		dim, _ := l["Event"].(string)
		if o, ok := l["Outcome"].(string); ok {
			dim = o
		}
		for _, m := range []string{"TaskEvents", "DeliveryLatency", "HandlerDuration"} {
			if v, ok := l[m]; ok {
				k := line{l["Lambda"].(string), dim, m}
				seen[k] = append(seen[k], v)
			}
		}
	}
	count := func(vs []any) (n int) {
		for _, v := range vs {
			if a, ok := v.([]any); ok {
				if len(a) > MaxValues {
					t.Errorf("a line of %d values, over %d", len(a), MaxValues)
				}
				n += len(a)
			} else {
				n++
			}
		}
		return n
	}
	if len(got) != 8 || got[0]["Event"] != "dead" ||
		!reflect.DeepEqual(seen[line{"echo", "started", "TaskEvents"}], []any{150.0}) ||
		!reflect.DeepEqual(seen[line{"echo", "succeeded", "TaskEvents"}], []any{150.0}) ||
		!reflect.DeepEqual(seen[line{"resize", "dead", "TaskEvents"}], []any{2.0}) ||
		len(seen[line{"echo", "", "DeliveryLatency"}]) != 2 || count(seen[line{"echo", "", "DeliveryLatency"}]) != 150 ||
		len(seen[line{"echo", "success", "HandlerDuration"}]) != 2 || count(seen[line{"echo", "success", "HandlerDuration"}]) != 150 ||
		!reflect.DeepEqual(seen[line{"echo", "fatal", "HandlerDuration"}], []any{3.0}) {
		t.Errorf("the invocation's end wrote %d lines:\n%s\nwant 8: three events summed, 150 deliveries and 150 durations in lines of at most %d, one fatal, resize's dead", len(got), buf.String(), MaxValues)
	}
	buf.Reset()
	r.Invoked() // nothing held, no units: nothing written
	if buf.Len() != 0 {
		t.Errorf("an invocation with nothing held wrote\n%s", buf.String())
	}
}
