package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/consumerfn"
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

// TestConsumerRigWritesItsMetrics: the consumer function the idle and scale bills price writes
// the EMF lines the deployed one writes into the log they price: a SweepDuration line a pass, and
// in each invocation, a period after the last, the units line of each lambda it read.
func TestConsumerRigWritesItsMetrics(t *testing.T) {
	awstest.Config(t, "SQS")
	cfg := awstest.Config(t, "DYNAMODB")
	lambdas := generatedLambdas(2)
	rig, err := newConsumerRig(t.Context(), cfg, "atf-bench-rig", lambdas, nil, 1, ConsumerMemoryMB, consumerfn.Period, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rig.b.drop()
	var log bytes.Buffer
	rig.fn.tee(&log)
	const invocations = 2
	for range invocations {
		if err := rig.invoke(t.Context(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}

	count := map[string]int{}
	for _, m := range emfMetrics(t, log.Bytes()) {
		count[m]++
	}
	if passes := rig.runner.passes; passes == 0 || count[emf.SweepDuration] != passes {
		t.Errorf("%d passes wrote %d %s lines", passes, count[emf.SweepDuration], emf.SweepDuration)
	}
	if want := invocations * len(lambdas); count[emf.ReadUnits] != want {
		t.Errorf("%d invocations over %d lambdas wrote %d units lines, want %d", invocations, len(lambdas), count[emf.ReadUnits], want)
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
