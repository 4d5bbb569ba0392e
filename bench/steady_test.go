package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/cost"
)

// TestSteadyBill: a month of 10,000 tasks a second from known units per task, worked out by hand
// at the prices of shared/cost: 26.28 billion tasks on the model's 80 shards, DynamoDB on demand by
// the unit and provisioned at 70% target utilization by the capacity-hour, the other services the
// same in both modes, lifecycle events priced apart; printed a row per service.
func TestSteadyBill(t *testing.T) {
	perTask := cost.Usage{
		APIRequests: 0.01, WriteUnits: 11, ReadUnits: 2, StorageGBMonths: 1e-6, SQSRequests: 0.3, LogBytes: 800,
		Lambda: map[string]cost.LambdaUse{
			"api": {Invocations: 0.01, GBSeconds: 0.0005}, "status": {Invocations: 0.2, GBSeconds: 0.001}, "worker": {Invocations: 0.1, GBSeconds: 0.002},
		},
	}
	b := steadyBill("immediate", perTask, 10_000, 3)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.01 {
			t.Errorf("%s: %.4f, want %.4f", what, got, want)
		}
	}
	near("tasks a month", b.TasksPerMonth, 26_280_000_000)
	if b.Shards != 80 {
		t.Errorf("shards %d, want ⌈4 × 10,000 / 500⌉ = 80", b.Shards)
	}
	near("write units a second", b.WriteUnitsPerS, 110_000)
	near("the consumer's reads a second", b.SweepReadUnitsPerS, (4+3)*80/2+1.5)
	near("read units a second", b.ReadUnitsPerS, 20_281.5)
	near("WCU", b.WCU, 157_143) // ⌈110,000 / 0.7⌉
	near("RCU", b.RCU, 28_974)  // ⌈20,281.5 / 0.7⌉

	// Each line as: on demand, provisioned.
	want := map[string][2]float64{
		"API Gateway":        {262.80, 262.80},   // 262.8 M requests × $1/M
		"Lambda":             {2860.01, 2860.01}, // 8.1468 G invocations, 91.98 M GB-s; the consumer's 43,800 of 58 s at 128 MB
		"DynamoDB writes":    {180_675, 74_564.35},
		"DynamoDB reads":     {6_662.47, 2_749.63},
		"DynamoDB storage":   {6_570, 6_570},       // 26,280 GB × $0.25
		"SQS":                {3_153.60, 3_153.60}, // 7.884 G requests × $0.40/M
		"EventBridge":        {0, 0},
		"CloudWatch Logs":    {9_790.06, 9_790.06}, // 800 B × 26.28 G = 19,580 GiB × $0.50
		"CloudWatch metrics": {3.90, 3.90},         // 13 series × $0.30
	}
	if len(b.Lines) != len(want) {
		t.Errorf("%d lines, want %d: %+v", len(b.Lines), len(want), b.Lines)
	}
	for _, l := range b.Lines {
		w, ok := want[l.Service]
		if !ok {
			t.Errorf("unexpected line %+v", l)
			continue
		}
		near(l.Service+" on demand", l.OnDemand, w[0])
		near(l.Service+" provisioned", l.Provisioned, w[1])
	}
	near("total on demand", b.OnDemand, 209_977.84)
	near("total provisioned", b.Provisioned, 99_954.36)
	if len(b.LeftOut) != 1 || !strings.HasPrefix(b.LeftOut[0].Service, "EventBridge lifecycle events") {
		t.Fatalf("left out %+v, want the lifecycle events", b.LeftOut)
	}
	near("lifecycle events", b.LeftOut[0].Provisioned, 78_840) // 3 a task × $1/M

	var out bytes.Buffer
	b.Print(&out)
	for _, row := range []string{"| DynamoDB writes | ", "| **total, a month** | | **$209,978** | **$99,954** |", "| EventBridge lifecycle events, where the environment publishes them: not in the total | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
	if n := strings.Count(out.String(), "\n| "); n != len(b.Lines)+3 { // the header, the total, the events
		t.Errorf("printed %d rows for %d lines:\n%s", n, len(b.Lines), out.String())
	}
}

// TestSteadyTarget: the target of a steady 10,000 tasks a second is judged on the provisioned
// bill, and not measured without one.
func TestSteadyTarget(t *testing.T) {
	target := func(r Results) Target {
		t.Helper()
		r.judge()
		for _, x := range r.Targets {
			if strings.HasPrefix(x.Name, "a steady 10,000 tasks a second on provisioned capacity") {
				return x
			}
		}
		t.Fatalf("no steady target in %+v", r.Targets)
		return Target{}
	}
	if got := target(Results{}); got.Met != nil || got.Got != "not measured" {
		t.Errorf("without a bill: %+v", got)
	}
	for provisioned, met := range map[float64]bool{24_999: true, 25_000: true, 25_001: false} {
		got := target(Results{Steady: &SteadyBill{}, USDPerMonth10kProvisioned: provisioned, USDPerMonth10kOnDemand: 200_000})
		if got.Met == nil || *got.Met != met || got.Want != "≤ $25,000 a month" || !strings.Contains(got.Got, "on demand") {
			t.Errorf("provisioned $%.0f: %+v, want met %v", provisioned, got, met)
		}
	}
}
