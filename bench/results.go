package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/openatf/atf/shared/cost"
)

// Results is bench/results.json. The fields up to AWSCallsPerImmediateTask are the headline
// numbers; the rest say how each was measured.
type Results struct {
	AtfEmbeddedTasksPerS    float64  `json:"atf_embedded_tasks_per_s"`
	AtfGrownTasksPerS       float64  `json:"atf_embedded_grown_tasks_per_s"` // with a million finished tasks in the table
	AtfPeakRSSMB            float64  `json:"atf_embedded_peak_rss_mb"`       // during the burn-down
	RiverTasksPerS          *float64 `json:"river_tasks_per_s"`              // null when the peers did not run
	AsynqTasksPerS          *float64 `json:"asynq_tasks_per_s"`
	AtfEmbeddedLatencyP50MS float64  `json:"atf_embedded_latency_p50_ms"`
	AtfEmbeddedLatencyP95MS float64  `json:"atf_embedded_latency_p95_ms"`
	AtfEmbeddedLatencyP99MS float64  `json:"atf_embedded_latency_p99_ms"`
	AtfEmulatedLatencyP95MS float64  `json:"atf_emulated_latency_p95_ms"`
	ScheduleRequestsPerS    float64  `json:"schedule_requests_per_s"`
	AtfEmbeddedWaitP99MS    float64  `json:"atf_embedded_wait_p99_ms"`      // a waiting GET's answer after its task ended
	USDPerMillionImmediate  float64  `json:"aws_usd_per_million_immediate"` // batches of 100
	USDPerMillionSingle     float64  `json:"aws_usd_per_million_immediate_single"`
	USDPerMillionDelayed1h  float64  `json:"aws_usd_per_million_delayed_1h"`
	USDPerMillionTwoRetries float64  `json:"aws_usd_per_million_two_retries"`
	IdleUSDPerMonth         float64  `json:"idle_usd_per_month"`
	// A month of a steady 10,000 tasks a second (SteadyBill), on demand and on provisioned capacity.
	USDPerMonth10kOnDemand    float64            `json:"aws_usd_per_month_10k_per_s_on_demand"`
	USDPerMonth10kProvisioned float64            `json:"aws_usd_per_month_10k_per_s_provisioned"`
	AWSCallsPerImmediateTask  map[string]float64 `json:"aws_calls_per_immediate_task"`

	Quick      bool         `json:"quick"`
	Smoke      bool         `json:"smoke,omitempty"`
	Started    string       `json:"started"`
	WallS      float64      `json:"wall_s"`
	Machine    Machine      `json:"machine"`
	Throughput Throughput   `json:"embedded_throughput"`
	Grown      *GrownRun    `json:"embedded_grown"`
	Peers      *PeerResult  `json:"peers"`
	PeersNote  string       `json:"peers_note,omitempty"`
	Latency    LatencyRun   `json:"embedded_latency"`
	Emulated   *LatencyRun  `json:"emulated_latency"`
	Schedule   ScheduleRun  `json:"schedule"`
	Wait       WaitRun      `json:"embedded_wait"`
	Periodic   PeriodicRun  `json:"embedded_periodic"`
	Cases      []CaseResult `json:"aws_cases"`
	Steady     *SteadyBill  `json:"steady_10k_per_s"`
	Idle       *IdleResult  `json:"idle"`
	IdleBill   *IdleBill    `json:"idle_bill"`
	Scale      []ScaleRun   `json:"scale,omitempty"`       // the idle consumer at each of scaleLambdas
	ScaleBills []ScaleBill  `json:"scale_bills,omitempty"` // the idle environment of billLambdas, by configuration
	AWSNote    string       `json:"aws_note,omitempty"`
	Prices     Prices       `json:"prices"`
	Targets    []Target     `json:"targets"`
}

// Machine is where the run happened.
type Machine struct {
	CPU      string  `json:"cpu"`
	Cores    int     `json:"cores"`
	MemoryGB float64 `json:"memory_gb"`
	Kernel   string  `json:"kernel"`
	Go       string  `json:"go"`
	LoadAvg  string  `json:"load_average_at_start"`
}

// PeerResult is the last line of bench/peers' output.
type PeerResult struct {
	RiverTasksPerS  float64 `json:"river_tasks_per_s"`
	AsynqTasksPerS  float64 `json:"asynq_tasks_per_s"`
	Tasks           int     `json:"tasks"`
	Concurrency     int     `json:"concurrency"`
	Batch           int     `json:"batch"`
	RiverVersion    string  `json:"river_version"`
	AsynqVersion    string  `json:"asynq_version"`
	PostgresVersion string  `json:"postgres_version"`
	RedisVersion    string  `json:"redis_version"`
}

// Prices records the prices used, with the date they were checked.
type Prices struct {
	Checked                     string  `json:"checked"`
	APIGatewayHTTPPerMillion    float64 `json:"api_gateway_http_per_million"`
	LambdaRequestsPerMillion    float64 `json:"lambda_requests_per_million"`
	LambdaArmPerGBSecond        float64 `json:"lambda_arm_per_gb_second"`
	DynamoDBWritePerMillion     float64 `json:"dynamodb_write_per_million"`
	DynamoDBReadPerMillion      float64 `json:"dynamodb_read_per_million"`
	DynamoDBStoragePerGBMonth   float64 `json:"dynamodb_storage_per_gb_month"`
	SQSStandardPerMillion       float64 `json:"sqs_standard_per_million"`
	EventBridgeRulePerMillion   float64 `json:"eventbridge_scheduled_rule_per_million"`
	CloudWatchLogsPerGB         float64 `json:"cloudwatch_logs_per_gb"`
	DynamoDBWCUHour             float64 `json:"dynamodb_provisioned_wcu_hour"`
	DynamoDBRCUHour             float64 `json:"dynamodb_provisioned_rcu_hour"`
	ProvisionedChecked          string  `json:"provisioned_checked"`
	APIMemoryMB, StatusMemoryMB int     `json:"-"`
}

func currentPrices() Prices {
	return Prices{
		Checked: cost.PricesChecked, APIGatewayHTTPPerMillion: cost.APIGatewayHTTPPerMillion,
		LambdaRequestsPerMillion: cost.LambdaRequestsPerMillion, LambdaArmPerGBSecond: cost.LambdaArmPerGBSecond,
		DynamoDBWritePerMillion: cost.DynamoDBWritePerMillion, DynamoDBReadPerMillion: cost.DynamoDBReadPerMillion,
		DynamoDBStoragePerGBMonth: cost.DynamoDBStoragePerGBMo, SQSStandardPerMillion: cost.SQSStandardPerMillion,
		EventBridgeRulePerMillion: cost.EventBridgeScheduledRulePerMillion, CloudWatchLogsPerGB: cost.CloudWatchLogsPerGB,
		DynamoDBWCUHour: cost.DynamoDBWCUHour, DynamoDBRCUHour: cost.DynamoDBRCUHour, ProvisionedChecked: cost.ProvisionedPricesChecked,
	}
}

// Target is one of the targets and whether this run met it.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  *bool  `json:"met"` // null when it could not be measured
}

// The targets of the issue.
const (
	targetP99MS         = 25.0   // at a steady 1,000 tasks a second (issue 15)
	targetWaitMS        = 100.0  // every waiter's answer after its task's end
	targetFiringP95MS   = 1000.0 // a periodic schedule's firing runs within 1 s of its time
	targetRiverRatio    = 1.0
	targetAsynqRatio    = 1.5
	targetUSDPerMillion = 2.50
	// Issue 31's other cost targets: one task per request, and two retries in batches of 100.
	targetUSDPerMillionSingle     = 4.0
	targetUSDPerMillionTwoRetries = 5.0
	// targetEmulatedP95MS: the delivery latency through the function handlers on the emulators.
	targetEmulatedP95MS = 250.0
	// targetSteadyUSDPerMonth: a steady 10,000 tasks a second on provisioned capacity, a month.
	targetSteadyUSDPerMonth = 25_000.0
	targetIdleUSDPerMonth   = 5.0
	// targetIdleUSDPerLambda: issue 28's idle bill of an environment of many lambdas, per lambda.
	targetIdleUSDPerLambda = 1.0
	targetGrownRatio       = 0.9   // throughput with a million finished tasks over an empty table's
	targetPeakRSSMB        = 200.0 // atf dev's during the burn-down
)

func verdict(ok bool) *bool { return &ok }

// judge fills r.Targets from the measurements.
func (r *Results) judge() {
	latency := Target{Name: "embedded p99 delivery latency", Want: fmt.Sprintf("≤ %.0f ms", targetP99MS), Got: "not measured"}
	if r.AtfEmbeddedTasksPerS > 0 { // the burn-down ran (not with -only wait, say)
		latency.Got, latency.Met = fmt.Sprintf("%.0f ms", r.AtfEmbeddedLatencyP99MS), verdict(r.AtfEmbeddedLatencyP99MS <= targetP99MS)
	}
	r.Targets = []Target{latency}
	river := Target{Name: "embedded throughput vs River", Want: "≥ 1 × River", Got: "peers not run"}
	asynq := Target{Name: "embedded throughput vs asynq", Want: "≥ 1.5 × asynq", Got: "peers not run"}
	if r.RiverTasksPerS != nil && r.AsynqTasksPerS != nil {
		rr, ra := r.AtfEmbeddedTasksPerS / *r.RiverTasksPerS, r.AtfEmbeddedTasksPerS / *r.AsynqTasksPerS
		river.Got, river.Met = fmt.Sprintf("%.2f × River", rr), verdict(rr >= targetRiverRatio)
		asynq.Got, asynq.Met = fmt.Sprintf("%.2f × asynq", ra), verdict(ra >= targetAsynqRatio)
	}
	awsCost := Target{Name: "AWS cost, immediate no-op tasks in batches of 100", Want: fmt.Sprintf("≤ $%.2f per million", targetUSDPerMillion), Got: "not measured"}
	idle := Target{Name: "idle dev environment, everything included", Want: fmt.Sprintf("≤ $%.2f a month", targetIdleUSDPerMonth), Got: "not measured"}
	single := Target{Name: "AWS cost, immediate no-op tasks scheduled one per request", Want: fmt.Sprintf("≤ $%.2f per million", targetUSDPerMillionSingle), Got: "not measured"}
	retries := Target{Name: "AWS cost, two retries, in batches of 100", Want: fmt.Sprintf("≤ $%.2f per million", targetUSDPerMillionTwoRetries), Got: "not measured"}
	if len(r.Cases) > 0 {
		awsCost.Got, awsCost.Met = fmt.Sprintf("$%.2f per million", r.USDPerMillionImmediate), verdict(r.USDPerMillionImmediate <= targetUSDPerMillion)
		single.Got, single.Met = fmt.Sprintf("$%.2f per million", r.USDPerMillionSingle), verdict(r.USDPerMillionSingle <= targetUSDPerMillionSingle)
		retries.Got, retries.Met = fmt.Sprintf("$%.2f per million", r.USDPerMillionTwoRetries), verdict(r.USDPerMillionTwoRetries <= targetUSDPerMillionTwoRetries)
	}
	emulated := Target{Name: "delivery latency on the emulators (function handlers), p95", Want: fmt.Sprintf("≤ %.0f ms", targetEmulatedP95MS), Got: "not measured"}
	if r.Emulated != nil {
		emulated.Got, emulated.Met = fmt.Sprintf("%.0f ms", r.AtfEmulatedLatencyP95MS), verdict(r.AtfEmulatedLatencyP95MS <= targetEmulatedP95MS)
	}
	switch {
	case r.IdleBill != nil && r.IdleBill.Note != "":
		idle.Got = fmt.Sprintf("$%.2f a month for the consumer alone (%s)", r.IdleUSDPerMonth, r.IdleBill.Note)
	case r.IdleBill != nil:
		idle.Got, idle.Met = fmt.Sprintf("$%.2f a month", r.IdleUSDPerMonth), verdict(r.IdleUSDPerMonth <= targetIdleUSDPerMonth)
	}
	steady := Target{Name: fmt.Sprintf("a steady %s tasks a second on provisioned capacity, everything included", num(steadyTasksPerS)),
		Want: "≤ " + monthly(targetSteadyUSDPerMonth) + " a month", Got: "not measured"}
	if r.Steady != nil {
		steady.Got = fmt.Sprintf("%s a month (%s on demand)", monthly(r.USDPerMonth10kProvisioned), monthly(r.USDPerMonth10kOnDemand))
		steady.Met = verdict(r.USDPerMonth10kProvisioned <= targetSteadyUSDPerMonth)
	}
	wait := Target{Name: "embedded wait for a result: answer after the task's end, slowest of the waiters", Want: fmt.Sprintf("≤ %.0f ms", targetWaitMS), Got: "not measured"}
	if r.Wait.Waiters > 0 {
		wait.Got, wait.Met = fmt.Sprintf("%.0f ms", r.Wait.Latency.Max), verdict(r.Wait.Latency.Max <= targetWaitMS && r.Wait.Missing == 0)
	}
	firing := Target{Name: "embedded periodic schedules: a firing's run after its time, p95, and none twice", Want: fmt.Sprintf("≤ %.0f ms, 0 duplicates", targetFiringP95MS), Got: "not measured"}
	if r.Periodic.Schedules > 0 {
		firing.Got = fmt.Sprintf("%.0f ms, %d duplicates", r.Periodic.Lateness.P95, r.Periodic.Duplicates)
		firing.Met = verdict(r.Periodic.Lateness.P95 <= targetFiringP95MS && r.Periodic.Duplicates == 0)
	}
	grown := Target{Name: "embedded throughput with 1,000,000 finished tasks in the table", Want: fmt.Sprintf("≥ %.1f × an empty table's", targetGrownRatio), Got: "not measured"}
	if g := r.Grown; g != nil {
		grown.Got = fmt.Sprintf("%.2f × with %s finished tasks", g.Ratio, num(float64(g.Finished)))
		if g.Finished >= 1_000_000 {
			grown.Met = verdict(g.Ratio >= targetGrownRatio)
		}
	}
	rss := Target{Name: "peak RSS during the embedded burn-down (atf dev and the benchmark's client, one process)", Want: fmt.Sprintf("≤ %.0f MB", targetPeakRSSMB), Got: "not measured"}
	if r.AtfPeakRSSMB > 0 {
		rss.Got, rss.Met = fmt.Sprintf("%.0f MB at %s tasks", r.AtfPeakRSSMB, num(float64(r.Throughput.Tasks))), verdict(r.AtfPeakRSSMB <= targetPeakRSSMB)
	}
	r.Targets = append(r.Targets, river, asynq, wait, awsCost, single, retries, steady, idle, emulated, firing, grown, rss)
	for _, b := range r.ScaleBills {
		r.Targets = append(r.Targets, Target{
			Name: fmt.Sprintf("idle environment of %d lambdas of %d priorities, everything included, %s configuration", b.Lambdas, b.Priorities, b.Environment),
			Want: fmt.Sprintf("≤ $%.2f a lambda a month", targetIdleUSDPerLambda), Got: fmt.Sprintf("$%.2f a lambda a month", b.PerLambda),
			Met: verdict(b.PerLambda <= targetIdleUSDPerLambda),
		})
	}
	for _, s := range r.Scale {
		if s.Lambdas == budgetLambdas {
			r.Targets = append(r.Targets, Target{
				Name: fmt.Sprintf("idle consumer pass over %d lambdas of %d priorities on the emulators", s.Lambdas, s.Priorities),
				Want: fmt.Sprintf("an invocation's passes within %.0f s, each within %.0f s, none failed; a drain within %.0f s", s.BudgetMS/1000, s.PassBudgetMS/1000, s.DrainBudgetMS/1000),
				Got:  fmt.Sprintf("%.0f ms, the slowest pass %.0f ms, %d failed; drain %.0f ms%s", s.SlowestMS, s.SlowestPass, s.FailedPasses, s.DrainMS, drainFailure(s)),
				Met:  verdict(s.Fits()),
			})
		}
	}
}

// num formats a number with thousands separators and no decimals.
func num(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if v < 0 {
		return "-" + b.String()
	}
	return b.String()
}

func usd(v float64) string {
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

// Print writes the table: markdown, so docs/benchmarks.md can quote it as it is.
func (r *Results) Print(w io.Writer) {
	mode := "full run"
	switch {
	case r.Smoke:
		mode = "SMOKE run (tiny counts: checks that the bench runs, measures nothing)"
	case r.Quick:
		mode = "QUICK run (smaller counts)"
	}
	fmt.Fprintf(w, "atf benchmarks: %s, %s, %s (%d cores), Go %s, load average at start %s\n\n",
		mode, r.Started, r.Machine.CPU, r.Machine.Cores, r.Machine.Go, r.Machine.LoadAvg)

	t := r.Throughput
	fmt.Fprintln(w, "| measurement | result |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| atf embedded throughput: %s no-op tasks scheduled in batches of %d, concurrency %d | %s tasks/s |\n",
		num(float64(t.Tasks)), t.Batch, t.Concurrency, num(r.AtfEmbeddedTasksPerS))
	if t.PeakRSSMB > 0 {
		fmt.Fprintf(w, "| peak RSS of that burn-down (atf dev's stack and the benchmark's client, one process: VmHWM) | %.0f MB |\n", t.PeakRSSMB)
	}
	if g := r.Grown; g != nil {
		fmt.Fprintf(w, "| burn-down on a table holding %s finished tasks (written beforehand, in %.0f s), next to empty tables: %s tasks each, in %d alternating rounds | %s tasks/s, %.2f × the empty tables' %s |\n",
			num(float64(g.Finished)), g.FillS, num(float64(g.Tasks)), g.Rounds, num(g.TasksPerS), g.Ratio, num(g.EmptyTasksPerS))
	}
	if p := r.Peers; p != nil {
		fmt.Fprintf(w, "| River %s on Postgres %s, same workload and concurrency | %s tasks/s (atf/River %.2f) |\n",
			p.RiverVersion, firstWord(p.PostgresVersion), num(p.RiverTasksPerS), r.AtfEmbeddedTasksPerS/p.RiverTasksPerS)
		fmt.Fprintf(w, "| asynq %s on Redis %s, same workload and concurrency | %s tasks/s (atf/asynq %.2f) |\n",
			p.AsynqVersion, p.RedisVersion, num(p.AsynqTasksPerS), r.AtfEmbeddedTasksPerS/p.AsynqTasksPerS)
	} else {
		fmt.Fprintf(w, "| peers: not run (%s) | |\n", r.PeersNote)
	}
	l := r.Latency
	fmt.Fprintf(w, "| atf embedded delivery latency (handler start − run_at), %s tasks/s steady for %.0f s, %s tasks | p50 %.0f · p95 %.0f · p99 %.0f · max %.0f ms |\n",
		num(l.Rate), l.Seconds, num(float64(l.Latency.Count)), l.Latency.P50, l.Latency.P95, l.Latency.P99, l.Latency.Max)
	if e := r.Emulated; e != nil {
		fmt.Fprintf(w, "| atf delivery latency on the emulators (function handlers, DynamoDB Local + moto), %s tasks/s for %.0f s | p50 %.0f · p95 %.0f · p99 %.0f · max %.0f ms |\n",
			num(e.Rate), e.Seconds, e.Latency.P50, e.Latency.P95, e.Latency.P99, e.Latency.Max)
	}
	s := r.Schedule
	fmt.Fprintf(w, "| schedule API (embedded), one task per request, %d clients | %s requests/s (in batches of 100: %s tasks/s) |\n",
		s.Clients, num(s.RequestsPerS), num(s.BatchTasksPerS))
	if wr := r.Wait; wr.Waiters > 0 {
		fmt.Fprintf(w, "| atf embedded wait for a result (answer − the task's end), %s waiting GETs on their own tasks, concurrency %d | p50 %.1f · p99 %.1f · max %.1f ms (%d unanswered) |\n",
			num(float64(wr.Waiters)), wr.Concurrency, wr.Latency.P50, wr.Latency.P99, wr.Latency.Max, wr.Missing)
	}
	fmt.Fprintln(w)

	if len(r.Cases) > 0 {
		fmt.Fprintf(w, "AWS cost per million no-op tasks, us-east-1 list prices checked %s (share of the total)\n\n", cost.PricesChecked)
		fmt.Fprintf(w, "| case | total | %s |\n", strings.Join(cost.Services, " | "))
		fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(cost.Services)))
		for _, c := range r.Cases {
			fmt.Fprintf(w, "| %s | **%s** |%s\n", c.Title, usd(c.TotalPerMillon), shares(c.USDPerMillion, c.TotalPerMillon))
		}
		if i := r.Idle; i != nil {
			fmt.Fprintf(w, "| consumer idle, per month: %d lambdas (%d queues), %d shards | **%s** |%s\n",
				len(i.Lambdas), i.Priorities, i.Shards, usd(i.Total), shares(i.USDPerMonth, i.Total))
		}
		fmt.Fprintln(w)
		c := r.Cases[0]
		fmt.Fprintf(w, "AWS calls per task, %s (capacity units computed from item sizes; DynamoDB Local's own report in brackets)\n\n", c.Title)
		fmt.Fprintln(w, "| operation | calls | write units | read units |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, op := range slices.Sorted(maps.Keys(c.Calls)) {
			x := c.Calls[op]
			wu, ru := "", ""
			if strings.HasPrefix(op, "DynamoDB.") {
				wu = fmt.Sprintf("%.2f (%.2f)", x.Write, x.ReportedWrite)
				ru = fmt.Sprintf("%.2f (%.2f)", x.Read, x.ReportedRead)
			}
			fmt.Fprintf(w, "| %s | %.3f | %s | %s |\n", op, x.Calls, wu, ru)
		}
		fmt.Fprintf(w, "| total DynamoDB | | %.2f | %.2f |\n\n", c.Usage.WriteUnits, c.Usage.ReadUnits)
		if r.Steady != nil {
			r.Steady.Print(w)
		}
	} else if r.AWSNote != "" {
		fmt.Fprintf(w, "AWS cost: not measured (%s)\n\n", r.AWSNote)
	}
	if b := r.IdleBill; b != nil {
		b.Print(w, r.Idle)
	}
	printScale(w, r.Scale)
	for _, b := range r.ScaleBills {
		b.Print(w)
	}

	fmt.Fprintln(w, "| target | wanted | this run | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range r.Targets {
		mark := "not measured"
		if t.Met != nil {
			mark = map[bool]string{true: "met", false: "**missed**"}[*t.Met]
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, mark)
	}
}

// shares is the table cells of a cost by service: dollars and share of the total.
func shares(bySvc map[string]float64, total float64) string {
	var b strings.Builder
	for _, s := range cost.Services {
		share := 0.0
		if total > 0 {
			share = bySvc[s] / total * 100
		}
		fmt.Fprintf(&b, " %s (%.0f%%) |", usd(bySvc[s]), share)
	}
	return b.String()
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}
