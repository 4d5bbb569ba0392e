package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/store/dynamostore"
)

func TestPercentile(t *testing.T) {
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	for _, c := range []struct {
		values []float64
		p      float64
		want   float64
	}{
		{hundred, 50, 50}, {hundred, 95, 95}, {hundred, 99, 99}, {hundred, 100, 100}, {hundred, 0.1, 1},
		{[]float64{7}, 99, 7}, {[]float64{1, 2}, 50, 1}, {nil, 50, 0},
	} {
		if got := Percentile(c.values, c.p); got != c.want {
			t.Errorf("p%v of %d values: %v, want %v", c.p, len(c.values), got, c.want)
		}
	}
	l := Summarise([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if l.Count != 3 || l.P50 != 2 || l.Max != 3 {
		t.Errorf("summary %+v, want sorted milliseconds", l)
	}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// TestUnits: write units by DynamoDB's rules, on the store's own table and indexes.
func TestUnits(t *testing.T) {
	sh := newShadow(dynamostore.TableInput("t"))
	task := func(status, dueSK string) item {
		it := item{"pk": s("task#l#a"), "sk": s("task"), "id": s("a"), "status": s(status),
			"list_pk": s("list#l#0"), "list_sk": s("1#a"), "version": &types.AttributeValueMemberN{Value: "3"}}
		if dueSK != "" {
			it["due_pk"], it["due_sk"] = s("due#l#0"), s(dueSK)
		}
		return it
	}
	key := sh.key(task("new", "w#1"))
	for _, c := range []struct {
		name         string
		item         item
		ok, transact bool
		want         float64
	}{
		{"created in a transaction: twice the table, each index once", task("new", "w#1"), true, true, 4},
		{"enqueued: the due entry moves, the list entry (no status) stays", task("enqueued", "w#2"), true, false, 3},
		{"a refused write: the table only", task("claimed", "r#3"), false, false, 1},
		{"rewritten unchanged: the table only", task("enqueued", "w#2"), true, false, 1},
		{"a projected status changes, no key: the table and the due entry", task("claimed", "w#2"), true, false, 2},
		{"finished: the due entry goes, the list entry stays", task("success", ""), true, false, 2},
	} {
		if got := sh.writeUnits(key, c.item, c.ok, c.transact); got != c.want {
			t.Errorf("%s: %v WRU, want %v", c.name, got, c.want)
		}
	}
	// An UpdateItem as the store writes it: the item after the expression, charged as a write.
	sh.writeUnits(key, task("enqueued", "w#2"), true, false)
	claim := &dynamodb.UpdateItemInput{
		Key:                       item{"pk": s("task#l#a"), "sk": s("task")},
		UpdateExpression:          aws.String("SET #a0 = :a0, #a1 = :a1 REMOVE #a2"),
		ExpressionAttributeNames:  map[string]string{"#a0": "status", "#a1": "due_sk", "#a2": "list_sk"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":a0": s("claimed"), ":a1": s("r#3")},
	}
	next := sh.updated(key, claim)
	if next["status"].(*types.AttributeValueMemberS).Value != "claimed" || next["due_sk"].(*types.AttributeValueMemberS).Value != "r#3" || next["list_sk"] != nil || next["id"] == nil {
		t.Errorf("updated: %v", next)
	}
	if got := sh.writeUnits(key, next, true, false); got != 4 { // the table, the due entry moved (2), the list entry gone (1)
		t.Errorf("an UpdateItem that moves the due entry and drops the list entry: %v WRU, want 4", got)
	}
	counter := &dynamodb.UpdateItemInput{
		Key: item{"pk": s("count#l#0"), "sk": s("count")}, UpdateExpression: aws.String("ADD #s0 :d0, #s1 :d1"),
		ExpressionAttributeNames:  map[string]string{"#s0": "new", "#s1": "enqueued"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":d0": &types.AttributeValueMemberN{Value: "-1"}, ":d1": &types.AttributeValueMemberN{Value: "1"}},
	}
	ckey := sh.key(counter.Key)
	if c := sh.updated(ckey, counter); c["new"].(*types.AttributeValueMemberN).Value != "-1" || c["enqueued"].(*types.AttributeValueMemberN).Value != "1" {
		t.Errorf("ADD on a new counter item: %v", c)
	} else if got := sh.writeUnits(ckey, c, true, false); got != 1 {
		t.Errorf("a counter write: %v WRU, want 1", got)
	}
	big := task("new", "w#1")
	big["payload"] = &types.AttributeValueMemberB{Value: make([]byte, 3000)}
	if got := sh.writeUnits(sh.key(big)+"x", big, false, false); got != 4 {
		t.Errorf("a refused 3 KB write: %v WRU, want 4", got)
	}
	if r := readUnits(5000, true); r != 2 {
		t.Errorf("a consistent read of 5 KB: %v RRU, want 2", r)
	}
	if r := readUnits(0, false); r != 0.5 {
		t.Errorf("an empty eventually consistent query: %v RRU, want 0.5", r)
	}
	if n := numberSize("1795395540000000000"); n != 6 { // 9 significant digits: 5 bytes, and 1
		t.Errorf("numberSize: %d", n)
	}
}

// TestResultsJSON: results.json carries the fields, each a number, and the calls per
// task as an object of numbers.
func TestResultsJSON(t *testing.T) {
	river, asynq := 3000.0, 6000.0
	r := Results{
		AtfEmbeddedTasksPerS: 2000, RiverTasksPerS: &river, AsynqTasksPerS: &asynq,
		AtfEmbeddedLatencyP50MS: 20, AtfEmbeddedLatencyP95MS: 40, AtfEmbeddedLatencyP99MS: 60,
		AtfEmulatedLatencyP95MS: 1100, ScheduleRequestsPerS: 1800, USDPerMillionImmediate: 14,
		USDPerMillionSingle: 18, USDPerMillionDelayed1h: 14, USDPerMillionTwoRetries: 39, IdleUSDPerMonth: 30,
		AWSCallsPerImmediateTask: map[string]float64{"DynamoDB.PutItem": 4},
		Peers:                    &PeerResult{RiverTasksPerS: river, AsynqTasksPerS: asynq},
		Cases:                    []CaseResult{{costCase: costCases[0], Calls: map[string]OpCount{"DynamoDB.PutItem": {Calls: 4, Write: 15}}}},
		Idle:                     &IdleResult{Total: 30},
		AtfEmbeddedWaitP99MS:     4,
		Wait:                     WaitRun{Waiters: 1000, Concurrency: 16, Latency: Latency{Count: 1000, P50: 1.5, P99: 4, Max: 120}},
		AtfGrownTasksPerS:        1900, AtfPeakRSSMB: 40,
		Throughput: Throughput{Tasks: 100_000, TasksPerS: 2000, PeakRSSMB: 40},
		Grown:      &GrownRun{Finished: 1_000_000, Rounds: 4, Tasks: 100_000, TasksPerS: 1900, EmptyTasksPerS: 2000, Ratio: 0.95},
	}
	r.judge()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"atf_embedded_tasks_per_s", "river_tasks_per_s", "asynq_tasks_per_s", "atf_embedded_latency_p50_ms",
		"atf_embedded_latency_p95_ms", "atf_embedded_latency_p99_ms", "atf_emulated_latency_p95_ms",
		"schedule_requests_per_s", "aws_usd_per_million_immediate", "aws_usd_per_million_immediate_single",
		"aws_usd_per_million_delayed_1h", "aws_usd_per_million_two_retries", "idle_usd_per_month",
		"atf_embedded_wait_p99_ms", "atf_embedded_grown_tasks_per_s", "atf_embedded_peak_rss_mb",
	} {
		if _, ok := got[f].(float64); !ok {
			t.Errorf("%s is %#v, want a number", f, got[f])
		}
	}
	calls, ok := got["aws_calls_per_immediate_task"].(map[string]any)
	if !ok || len(calls) == 0 {
		t.Fatalf("aws_calls_per_immediate_task is %#v, want an object", got["aws_calls_per_immediate_task"])
	}
	for op, v := range calls {
		if _, ok := v.(float64); !ok {
			t.Errorf("aws_calls_per_immediate_task[%s] is %#v, want a number", op, v)
		}
	}
	var b strings.Builder
	r.Print(&b)
	for _, want := range []string{"atf/River 0.67", "atf/asynq 0.33", "| embedded p99 delivery latency | ≤ 25 ms | 60 ms | **missed** |", "**missed**",
		"p50 1.5 · p99 4.0 · max 120.0 ms (0 unanswered)", "| 40 MB |", "| 1,900 tasks/s, 0.95 × the empty tables' 2,000 |",
		"| 0.95 × with 1,000,000 finished tasks | met |", "| 40 MB at 100,000 tasks | met |", "| embedded wait for a result: answer after the task's end, slowest of the waiters | ≤ 100 ms | 120 ms | **missed** |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}
