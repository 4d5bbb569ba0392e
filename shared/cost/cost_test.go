package cost

import (
	"math"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// TestCost: each service is priced at its named list price, the total adds them up, and a
// per-task usage scales to a million tasks.
func TestCost(t *testing.T) {
	u := Usage{
		APIRequests: 1e6, WriteUnits: 2e6, ReadUnits: 4e6, StorageGBMonths: 2, SQSRequests: 3e6,
		EventBridgeEvents: 1e6, LogBytes: 1 << 30,
		Lambda: map[string]LambdaUse{"status": {Invocations: 1e6, GBSeconds: 1000}, "api": {Invocations: 1e6}},
	}
	want := map[string]float64{
		SvcAPIGateway: 1.00, SvcLambda: 0.40 + 1000*0.0000133334, SvcDynamoDB: 2*0.625 + 4*0.125 + 2*0.25,
		SvcSQS: 1.20, SvcEventBridge: 0, SvcLogs: 0.50,
	}
	got := u.Cost()
	sum := 0.0
	for s, w := range want {
		if math.Abs(got[s]-w) > 1e-9 {
			t.Errorf("%s: $%v, want $%v", s, got[s], w)
		}
		sum += w
	}
	if math.Abs(Total(got)-sum) > 1e-9 {
		t.Errorf("total $%v, want $%v", Total(got), sum)
	}
	// A task's usage times a million is a million tasks' usage.
	per := Usage{WriteUnits: 19, Lambda: map[string]LambdaUse{"status": {Invocations: 3}}}
	if c := per.Scale(1e6).Cost(); math.Abs(c[SvcDynamoDB]-19*0.625) > 1e-9 || math.Abs(c[SvcLambda]-0.60) > 1e-9 {
		t.Errorf("a million tasks of 19 WRU and 3 invocations: %v", c)
	}
	if g := GBSeconds(1000, 512); g != 0.5 {
		t.Errorf("1 s at 512 MB is %v GB-s, want 0.5", g)
	}
}

// TestTransitionUnits: the life docs/capacity.md prices, schedule sent first and claim from a
// message that times the lease (neither with a due entry), and success, is 7 WRU and 2 RRU; a
// retry sent ahead and a death each pay the attempt's history item, a retry its due entry, a
// death its failed index entry.
func TestTransitionUnits(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to task.Status
		want     Units
	}{
		{"schedule, sent first", "", task.StatusEnqueued, Units{Write: 3}},
		{"schedule, due later", "", task.StatusNew, Units{Write: 4}},
		{"claim", task.StatusEnqueued, task.StatusProcessing, Units{Write: 2, Read: 1}},
		{"success", task.StatusProcessing, task.StatusSuccess, Units{Write: 2, Read: 1}},
		{"retry, sent ahead", task.StatusProcessing, task.StatusEnqueued, Units{Write: 4, Read: 1}},
		{"dead", task.StatusProcessing, task.StatusDead, Units{Write: 4, Read: 1}},
		{"redrive", task.StatusDead, task.StatusEnqueued, Units{Write: 4, Read: 1}},
		{"cancel a task sent first", task.StatusEnqueued, task.StatusCancelled, Units{Write: 2, Read: 1}},
		{"cancel a task due later", task.StatusNew, task.StatusCancelled, Units{Write: 3, Read: 1}},
	} {
		if got := TransitionUnits(c.from, c.to); got != c.want {
			t.Errorf("%s (%q to %q): %+v, want %+v", c.name, c.from, c.to, got, c.want)
		}
	}
	life := TransitionUnits("", task.StatusEnqueued).Plus(TransitionUnits(task.StatusEnqueued, task.StatusProcessing)).
		Plus(TransitionUnits(task.StatusProcessing, task.StatusSuccess))
	if life != (Units{Write: 7, Read: 2}) {
		t.Errorf("a task's life: %+v, want 7 WRU and 2 RRU", life)
	}
	if got, want := life.Times(1e6).USD(), 7*DynamoDBWritePerMillion+2*DynamoDBReadPerMillion; math.Abs(got-want) > 1e-9 {
		t.Errorf("a million lives: $%v, want $%v", got, want)
	}
}
