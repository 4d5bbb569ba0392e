package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/openatf/atf/shared/adapter/emf"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// TestHarnessFunctionsWriteTheirMetrics: each function of the cost harness writes the EMF lines
// the deployed function writes, into the log whose bytes the case prices.
func TestHarnessFunctionsWriteTheirMetrics(t *testing.T) {
	awstest.Config(t, "SQS")
	cfg := awstest.Config(t, "DYNAMODB")
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "` + lambdaName + `", "concurrency": 10}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHarness(t.Context(), cfg, reg.Lambdas[0])
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	fns := []*function{h.apiFn, h.consFn, h.statusFn, h.workerFn}
	logs := make([]*bytes.Buffer, len(fns))
	for i, f := range fns {
		logs[i] = &bytes.Buffer{}
		f.tee(logs[i])
	}
	const n = 10
	res, err := h.runCase(t.Context(), costCase{Name: "emf", Batch: n}, n)
	if err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{
		"api":      {"TaskEvents scheduled", emf.WriteUnits},
		"consumer": {emf.SweepDuration},
		"status":   {"TaskEvents started", "TaskEvents succeeded", emf.DeliveryLatency, emf.WriteUnits},
		"worker":   {emf.HandlerDuration},
	}
	for i, f := range fns {
		f.mu.Lock() // the consumer still sweeps
		log := bytes.Clone(logs[i].Bytes())
		f.mu.Unlock()
		got := emfMetrics(t, log)
		for _, m := range want[f.name] {
			if !slices.Contains(got, m) {
				t.Errorf("the %s function wrote no %s line; its metrics: %v", f.name, m, got)
			}
		}
		if f == h.consFn {
			continue // its sweeps that moved nothing are priced apart
		}
		if priced := res.LogBytes[f.name] * n; math.Abs(priced-float64(len(log))) > 0.5 {
			t.Errorf("the %s function logged %d bytes, the case priced %.1f", f.name, len(log), priced)
		}
	}
}

// emfMetrics returns the metrics of the EMF lines in log, TaskEvents with their event.
func emfMetrics(t *testing.T, log []byte) []string {
	t.Helper()
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var line struct {
			Event string `json:"Event"`
			AWS   *struct {
				CloudWatchMetrics []struct {
					Metrics []struct{ Name string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line that is no JSON: %q", sc.Text())
		}
		if line.AWS == nil {
			continue // a log record
		}
		for _, d := range line.AWS.CloudWatchMetrics {
			for _, m := range d.Metrics {
				if m.Name == emf.TaskEvents {
					names = append(names, m.Name+" "+line.Event)
				} else {
					names = append(names, m.Name)
				}
			}
		}
	}
	return names
}
