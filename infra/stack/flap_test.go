package stack

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
)

// A replay of an ecs lambda's scaling: a small simulator of CloudWatch alarm evaluation and of
// Application Auto Scaling step scaling, driven by the alarms and policies of the synthesized
// template (not declared again here), over a model of the lambda's queues and executors, minute
// by minute.
//
// What it models of CloudWatch: each alarm is evaluated every minute on its last
// EvaluationPeriods datapoints of one minute, seen lag minutes late; it is in ALARM when at least
// DatapointsToAlarm of them breach its threshold, and while in ALARM it invokes its policy at
// every evaluation (step scaling goes on acting until the alarm returns to OK). Its expression
// is evaluated over the metrics it names. Of Application Auto Scaling: the step whose interval
// holds the breach (the value less the threshold), the adjustment type, the target's bounds, and
// the cooldowns: a scale-out within its cooldown counts what the one that started it added; a
// scale-in within its cooldown is refused; a scale-out ends a scale-in's cooldown.
//
// Of the executors (functions/executor): an executor is ready startMinutes after its desired
// count rose; each minute it receives the visible messages its free slots take and claims them
// (the message is deleted at the claim); a task runs its minutes, then may send a retry with a
// delay. Stopped, an executor drains: a task that needs longer than the stop timeout is cut and
// released (its message visible again). The gauges are sampled at the end of each minute; a
// message received in a minute is claimed in it, so none is in flight across a minute.

// startMinutes is how long a new executor takes to start and receive: Fargate's start, about a
// minute, and the image pull.
const startMinutes = 2

type simMetric struct{ name, priority string }

type simStep struct {
	lower, upper *float64
	adjustment   float64
}

type simPolicy struct {
	adjustment string // ChangeInCapacity or ExactCapacity
	cooldown   int    // minutes
	steps      []simStep
}

type simAlarm struct {
	path             string
	periods, toAlarm int
	threshold        float64
	comparison       string
	expression       string
	metrics          map[string]simMetric // by id
	policy           *simPolicy
}

// scaling is an ecs lambda's scaling as its template declares it.
type scaling struct {
	min, max int
	alarms   []*simAlarm
}

// scalingOf reads lambda e's scalable target, alarms and policies from environment env's
// templates. Anything the simulator does not model fails the test, so that a change of the
// template cannot pass unreplayed.
func scalingOf(t *testing.T, env string, s *synthesized, e registry.Entry) *scaling {
	t.Helper()
	prefix := "Lambda-" + e.Name + "/Executor/Scaling/"
	priorityOf := map[string]string{} // queue logical id → priority
	for id, q := range s.resources("AWS::SQS::Queue") {
		for _, p := range e.Priorities {
			if name, err := sqsqueue.QueueName("atf-"+env, e.Name, p); err == nil && props(q)["QueueName"] == name {
				priorityOf[id] = p
			}
		}
	}
	sc := &scaling{}
	for _, tg := range s.resources("AWS::ApplicationAutoScaling::ScalableTarget") {
		if strings.HasPrefix(path(tg), prefix) {
			sc.min, sc.max = int(props(tg)["MinCapacity"].(float64)), int(props(tg)["MaxCapacity"].(float64))
		}
	}
	all := s.json["Resources"].(map[string]any)
	for _, a := range s.resources("AWS::CloudWatch::Alarm") {
		if !strings.HasPrefix(path(a), prefix) {
			continue
		}
		p := props(a)
		al := &simAlarm{
			path: path(a), periods: int(p["EvaluationPeriods"].(float64)), threshold: p["Threshold"].(float64),
			comparison: p["ComparisonOperator"].(string), metrics: map[string]simMetric{},
		}
		al.toAlarm = al.periods
		if n, ok := p["DatapointsToAlarm"].(float64); ok {
			al.toAlarm = int(n)
		}
		for _, m := range list(p["Metrics"]) {
			m := m.(map[string]any)
			id, _ := m["Id"].(string)
			if expr, ok := m["Expression"].(string); ok {
				if m["ReturnData"] != false {
					al.expression = expr
				}
				continue
			}
			ms := m["MetricStat"].(map[string]any)
			metric := ms["Metric"].(map[string]any)
			if ms["Period"] != 60.0 || metric["Namespace"] != "AWS/SQS" || (ms["Stat"] != "Maximum" && ms["Stat"] != "Sum") {
				t.Fatalf("%s: metric %v: the simulator models minutes of SQS metrics, Maximum or Sum", al.path, m)
			}
			var queue string
			for _, d := range list(metric["Dimensions"]) {
				if d := d.(map[string]any); d["Name"] == "QueueName" {
					queue = ref(d["Value"])
				}
			}
			prio, ok := priorityOf[queue]
			if !ok {
				t.Fatalf("%s: metric %v reads no queue of %s", al.path, m, e.Name)
			}
			al.metrics[id] = simMetric{name: metric["MetricName"].(string), priority: prio}
		}
		if al.expression == "" {
			t.Fatalf("%s: no expression: the simulator models math expressions", al.path)
		}
		actions := refs(p["AlarmActions"])
		if len(actions) != 1 {
			t.Fatalf("%s: actions %v, want one scaling policy", al.path, actions)
		}
		pol := props(all[actions[0]].(map[string]any))
		if pol["PolicyType"] != "StepScaling" {
			t.Fatalf("%s: policy %v: the simulator models step scaling", al.path, pol)
		}
		c := pol["StepScalingPolicyConfiguration"].(map[string]any)
		al.policy = &simPolicy{adjustment: c["AdjustmentType"].(string)}
		if cd, ok := c["Cooldown"].(float64); ok {
			al.policy.cooldown = int(math.Ceil(cd / 60))
		}
		for _, st := range list(c["StepAdjustments"]) {
			st := st.(map[string]any)
			step := simStep{adjustment: st["ScalingAdjustment"].(float64)}
			if v, ok := st["MetricIntervalLowerBound"].(float64); ok {
				step.lower = &v
			}
			if v, ok := st["MetricIntervalUpperBound"].(float64); ok {
				step.upper = &v
			}
			al.policy.steps = append(al.policy.steps, step)
		}
		sc.alarms = append(sc.alarms, al)
	}
	if sc.max == 0 || len(sc.alarms) == 0 {
		t.Fatalf("%s: no scaling of %s", env, e.Name)
	}
	slices.SortFunc(sc.alarms, func(a, b *simAlarm) int { return strings.Compare(a.path, b.path) })
	return sc
}

// value evaluates the alarm's expression over the values of its metrics: SUM(METRICS()) or a sum
// of metric ids, what the stack writes.
func (a *simAlarm) value(of func(simMetric) float64) (float64, error) {
	sum := 0.0
	for _, term := range strings.Split(a.expression, "+") {
		term = strings.TrimSpace(term)
		if term == "SUM(METRICS())" {
			for _, m := range a.metrics {
				sum += of(m)
			}
			continue
		}
		m, ok := a.metrics[term]
		if !ok {
			return 0, fmt.Errorf("%s: expression %q: the simulator knows SUM(METRICS()) and sums of metric ids", a.path, a.expression)
		}
		sum += of(m)
	}
	return sum, nil
}

func (a *simAlarm) breaches(v float64) bool {
	switch a.comparison {
	case "GreaterThanOrEqualToThreshold":
		return v >= a.threshold
	case "GreaterThanThreshold":
		return v > a.threshold
	case "LessThanOrEqualToThreshold":
		return v <= a.threshold
	case "LessThanThreshold":
		return v < a.threshold
	}
	panic("comparison " + a.comparison)
}

// step is the policy's step for a breach of delta, if any: an interval above the threshold
// holds its lower bound, one below holds its upper bound.
func (p *simPolicy) step(delta float64) (simStep, bool) {
	for _, s := range p.steps {
		below := s.upper != nil && *s.upper <= 0
		inLower := s.lower == nil || (below && delta > *s.lower) || (!below && delta >= *s.lower)
		inUpper := s.upper == nil || (below && delta <= *s.upper) || (!below && delta < *s.upper)
		if inLower && inUpper {
			return s, true
		}
	}
	return simStep{}, false
}

type message struct {
	priority   string
	visibleAt  int // minute
	runs       int // minutes its task runs once claimed
	retryDelay int // > 0: the run ends with a retry sent with this delay, which runs retryRuns
	retryRuns  int
	claimedAt  int
}

type simExecutor struct {
	readyAt int
	running []*message
}

type change struct {
	minute, from, to int
	alarm            string
}

// replay is one run of the simulator.
type replay struct {
	t           *testing.T
	sc          *scaling
	lag         int
	order       []int // the order the alarms are evaluated in each minute
	concurrency int

	desired           int
	outUntil, outBase int // the scale-out cooldown and the capacity it started from
	inUntil           int // the scale-in cooldown
	executors         []*simExecutor
	waiting           []*message // sent, not claimed
	arrivals          map[int][]*message
	gauges            []map[simMetric]float64 // by minute
	changes           []change
	cut               []string
	claims            []int // minutes
	// idleAtEveryScaleIn is false once a scale-in stopped executors while a message waited or
	// a task ran.
	idleAtEveryScaleIn bool
	lastScaleInMinute  int
}

func newReplay(t *testing.T, sc *scaling, concurrency, lag int, reversed bool) *replay {
	r := &replay{t: t, sc: sc, lag: lag, concurrency: concurrency, arrivals: map[int][]*message{}, idleAtEveryScaleIn: true}
	for i := range sc.alarms {
		r.order = append(r.order, i)
	}
	if reversed {
		slices.Reverse(r.order)
	}
	// After a deployment: one executor, up, and queues that were quiet before.
	r.desired = 1
	r.executors = []*simExecutor{{readyAt: 0}}
	return r
}

// metric is a metric's value in minute m; quiet before the replay.
func (r *replay) metric(m int, x simMetric) float64 {
	if m < 0 {
		return 0
	}
	return r.gauges[m][x]
}

// run advances the replay to minute end (exclusive).
func (r *replay) run(end int) {
	for m := len(r.gauges); m < end; m++ {
		r.minute(m)
	}
}

func (r *replay) minute(m int) {
	deleted := map[string]float64{}
	r.waiting = append(r.waiting, r.arrivals[m]...)
	for _, x := range r.executors {
		var still []*message
		for _, msg := range x.running {
			if msg.claimedAt+msg.runs > m {
				still = append(still, msg)
				continue
			}
			if msg.retryDelay > 0 {
				r.waiting = append(r.waiting, &message{priority: msg.priority, visibleAt: m + msg.retryDelay, runs: msg.retryRuns})
			}
		}
		x.running = still
		if x.readyAt > m {
			continue
		}
		var left []*message
		for _, msg := range r.waiting {
			if msg.visibleAt <= m && len(x.running) < r.concurrency {
				msg.claimedAt = m
				x.running = append(x.running, msg)
				deleted[msg.priority]++
				r.claims = append(r.claims, m)
				continue
			}
			left = append(left, msg)
		}
		r.waiting = left
	}
	g := map[simMetric]float64{}
	for _, msg := range r.waiting {
		if msg.visibleAt <= m {
			g[simMetric{"ApproximateNumberOfMessagesVisible", msg.priority}]++
		} else {
			g[simMetric{"ApproximateNumberOfMessagesDelayed", msg.priority}]++
		}
	}
	for p, n := range deleted {
		g[simMetric{"NumberOfMessagesDeleted", p}] = n
	}
	r.gauges = append(r.gauges, g)

	for _, i := range r.order {
		a := r.sc.alarms[i]
		breaching := 0
		var last float64
		for d := m - r.lag - a.periods + 1; d <= m-r.lag; d++ {
			v, err := a.value(func(x simMetric) float64 { return r.metric(d, x) })
			if err != nil {
				r.t.Fatal(err)
			}
			if a.breaches(v) {
				breaching++
			}
			last = v
		}
		if breaching >= a.toAlarm {
			r.invoke(m, a, last-a.threshold)
		}
	}
}

// invoke runs the alarm's policy, as Application Auto Scaling does, and starts or stops
// executors to the new desired count.
func (r *replay) invoke(m int, a *simAlarm, delta float64) {
	p := a.policy
	s, ok := p.step(delta)
	if !ok {
		return
	}
	var want int
	switch p.adjustment {
	case "ChangeInCapacity":
		if m < r.outUntil && s.adjustment > 0 {
			want = max(r.desired, r.outBase+int(s.adjustment))
		} else {
			want = r.desired + int(s.adjustment)
		}
	case "ExactCapacity":
		want = int(s.adjustment)
	default:
		r.t.Fatalf("%s: adjustment type %s", a.path, p.adjustment)
	}
	want = min(max(want, r.sc.min), r.sc.max)
	switch {
	case want > r.desired:
		if m >= r.outUntil {
			r.outBase, r.outUntil = r.desired, m+p.cooldown
		}
		r.inUntil = m // a scale-out ends the scale-in's cooldown
	case want < r.desired:
		if m < r.inUntil {
			return
		}
		r.inUntil = m + p.cooldown
		if len(r.waiting) > 0 || r.running() > 0 {
			r.idleAtEveryScaleIn = false
		}
		r.lastScaleInMinute = m
	default:
		return
	}
	r.changes = append(r.changes, change{minute: m, from: r.desired, to: want, alarm: a.path})
	r.desired = want
	for len(r.executors) > r.desired {
		x := r.executors[len(r.executors)-1]
		r.executors = r.executors[:len(r.executors)-1]
		for _, msg := range x.running {
			if left := time.Duration(msg.claimedAt+msg.runs-m) * time.Minute; left > executorStopTimeout {
				r.cut = append(r.cut, fmt.Sprintf("minute %d: a task claimed in minute %d cut with %s left", m, msg.claimedAt, left))
				r.waiting = append(r.waiting, &message{priority: msg.priority, visibleAt: m + 1, runs: msg.runs - (m - msg.claimedAt)})
			}
		}
	}
	for len(r.executors) < r.desired {
		r.executors = append(r.executors, &simExecutor{readyAt: m + startMinutes})
	}
}

func (r *replay) running() int {
	n := 0
	for _, x := range r.executors {
		n += len(x.running)
	}
	return n
}

// scalingLambda is the registry's first ecs lambda that scales, and its window.
func scalingLambda(t *testing.T) (registry.Entry, time.Duration) {
	for _, e := range mustLoadRegistry(t).Lambdas {
		if w, ok := scaleInWindow(e); ok && e.Kind == registry.KindECS {
			return e, w
		}
	}
	t.Fatal("the registry has no ecs lambda that scales")
	return registry.Entry{}, 0
}

// TestExecutorsDoNotFlap replays, through the dev template's alarms and policies, a message that
// arrives after the executors scaled in to zero: its task runs the lambda's whole timeout, and,
// in a second case, ends with a retry delayed past the scale-in window of the first claim. Each
// time: one scale-out, the tasks run uncut, one scale-in once nothing waits, is delayed or runs,
// and no other change. In every order of the alarms' evaluations, and with metrics seen one or
// three minutes late.
func TestExecutorsDoNotFlap(t *testing.T) {
	e, window := scalingLambda(t)
	sc := scalingOf(t, "dev", environments(t)["dev"], e)
	minutes := int(window / time.Minute)
	runs := int(e.Timeout / time.Minute)
	for _, c := range []struct {
		name       string
		retryDelay int
	}{
		{"a task of the whole timeout", 0},
		{"then a retry due 10 minutes after it", 10},
	} {
		for _, lag := range []int{1, 3} {
			for _, reversed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/lag %dm/reversed %v", c.name, lag, reversed), func(t *testing.T) {
					r := newReplay(t, sc, e.Concurrency, lag, reversed)
					r.run(minutes + lag + 2)
					if r.desired != 0 {
						t.Fatalf("no scale-in within the window %s of a quiet start: changes %v", window, r.changes)
					}
					arrive := len(r.gauges) + 30
					r.arrivals[arrive] = []*message{{
						priority: e.Priorities[len(e.Priorities)/2], visibleAt: arrive, runs: runs,
						retryDelay: c.retryDelay, retryRuns: 5,
					}}
					before := len(r.changes)
					r.run(arrive + runs + c.retryDelay + 5 + 2*minutes + 60)
					after := r.changes[before:]
					if len(after) != 2 || after[0].from != 0 || after[0].to != 1 || after[1].to != 0 {
						t.Errorf("%d changes after the message, the first %v; want one scale-out to 1 and one scale-in to 0", len(after), after[:min(len(after), 6)])
					}
					if len(r.cut) > 0 {
						t.Errorf("tasks cut: %v", r.cut)
					}
					if !r.idleAtEveryScaleIn {
						t.Error("a scale-in stopped executors while messages waited or tasks ran")
					}
					if n := len(r.claims); n == 0 || r.lastScaleInMinute < r.claims[n-1]+minutes {
						t.Errorf("the last scale-in in minute %d, the last claim in minute %v: want the window %s between them", r.lastScaleInMinute, r.claims, window)
					}
				})
			}
		}
	}
}

// TestScaleInReadsWaitingWork: the scale-in alarm of every ecs executor that scales reads,
// through its expression, the visible and the delayed messages of each of its lambda's queues,
// and their deletions (claims): any one of them alone keeps it from breaching. And the scale-out
// alarm reads each queue's visible messages.
func TestScaleInReadsWaitingWork(t *testing.T) {
	for name, s := range environments(t) {
		for _, e := range mustLoadRegistry(t).Lambdas {
			if _, ok := scaleInWindow(e); !ok || e.Kind != registry.KindECS {
				continue
			}
			sc := scalingOf(t, name, s, e)
			var in, out *simAlarm
			for _, a := range sc.alarms {
				switch a.policy.adjustment {
				case "ExactCapacity":
					in = a
				case "ChangeInCapacity":
					out = a
				}
			}
			if in == nil || out == nil {
				t.Fatalf("%s: %s: alarms %v, want a scale-out and a scale-in", name, e.Name, sc.alarms)
			}
			check := func(a *simAlarm, metric, prio string, wantBreach bool) {
				v, err := a.value(func(x simMetric) float64 {
					if x == (simMetric{metric, prio}) {
						return 1
					}
					return 0
				})
				if err != nil {
					t.Fatal(err)
				}
				if a.breaches(v) != wantBreach {
					t.Errorf("%s: %s: %s with one %s in queue %s: breaching %v, want %v", name, e.Name, a.path, metric, prio, !wantBreach, wantBreach)
				}
			}
			for _, p := range e.Priorities {
				for _, m := range []string{"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesDelayed", "NumberOfMessagesDeleted"} {
					check(in, m, p, false)
				}
				check(out, "ApproximateNumberOfMessagesVisible", p, true)
			}
			if v, _ := in.value(func(simMetric) float64 { return 0 }); !in.breaches(v) {
				t.Errorf("%s: %s: the scale-in alarm does not breach on quiet queues", name, e.Name)
			}
		}
	}
}
