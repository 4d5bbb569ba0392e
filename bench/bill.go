package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/service/consumer"
)

// Standing charges of an idle environment: list prices in us-east-1, on demand, in USD, read on
// 2026-11-24 from the pages named. Free tiers are left out, but for the dashboards the issue
// names (CloudWatch's free three).
const (
	IdlePricesChecked = "2026-11-24"

	// https://aws.amazon.com/vpc/pricing/ : a NAT gateway per hour, before the data it processes.
	NATGatewayPerHour = 0.045
	// https://aws.amazon.com/vpc/pricing/ : a public IPv4 address per hour, in use or idle (an
	// Elastic IP, a NAT gateway's, a Fargate task's with AssignPublicIp).
	PublicIPv4PerHour = 0.005
	// https://aws.amazon.com/privatelink/pricing/ : an interface endpoint per hour in each
	// availability zone (subnet) it is in. Gateway endpoints (S3, DynamoDB) cost nothing.
	InterfaceEndpointPerAZHour = 0.01

	// https://aws.amazon.com/cloudwatch/pricing/ : an alarm per metric it watches and month,
	// standard resolution (a period of a minute or more) and high; a dashboard per month beyond
	// the free three; log storage per GB-month (archived, compressed: counted here uncompressed,
	// an upper bound).
	CloudWatchAlarmPerMetricMonth         = 0.10
	CloudWatchHighResAlarmPerMetricMonth  = 0.30
	CloudWatchDashboardPerMonth           = 3.00
	CloudWatchFreeDashboards              = 3
	CloudWatchLogsStoragePerGBMonth       = 0.03
	CloudWatchLogsRetentionUnsetMonths    = 12 // a group that never expires: a year's logs, say
	cloudWatchHighResolutionPeriodSeconds = 60

	// https://aws.amazon.com/cloudwatch/pricing/ : a custom metric per month, the first 10,000,
	// prorated by the hour. Container Insights on an ECS cluster (the cluster setting
	// containerInsights "enabled", which infra/stack sets where container_insights is on) is
	// billed so, for the metrics it makes; ECS makes them only while tasks run ("Metrics are not
	// visible until the container tasks have been running":
	// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics.html).
	// (Enhanced observability is billed per observation instead; the stack does not turn it on.)
	CloudWatchCustomMetricPerMonth = 0.30
	// The metrics Container Insights makes on Fargate, as listed in
	// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-ECS.html:
	// per cluster CpuUtilized, CpuReserved, MemoryUtilized, MemoryReserved, NetworkRxBytes,
	// NetworkTxBytes, StorageReadBytes, StorageWriteBytes, ServiceCount and TaskCount; per
	// service those eight of CPU, memory, network and storage and DeploymentCount,
	// DesiredTaskCount, PendingTaskCount, RunningTaskCount and TaskSetCount; per task definition
	// family the eight. Their performance log events (CloudWatchLogsPerGB) are left out.
	ContainerInsightsClusterMetrics    = 10
	ContainerInsightsServiceMetrics    = 13
	ContainerInsightsTaskFamilyMetrics = 8

	// https://aws.amazon.com/kms/pricing/ : a customer managed key per month.
	KMSKeyPerMonth = 1.00

	// https://aws.amazon.com/secrets-manager/pricing/ : a secret per month.
	SecretPerMonth = 0.40

	// https://aws.amazon.com/fargate/pricing/ : Linux, per vCPU-hour and GB-hour, on Arm (Graviton)
	// and on x86.
	FargateArmVCPUPerHour = 0.03238
	FargateArmGBPerHour   = 0.00356
	FargateX86VCPUPerHour = 0.04048
	FargateX86GBPerHour   = 0.004445

	// https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html : an SQS event source mapping
	// polls its queue with long polls (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html:
	// 20 s at most) from five pollers when the queue is idle; each poll is an SQS request
	// (SQSStandardPerMillion), messages or not.
	ESMIdlePollers         = 5
	SQSLongPollWaitSeconds = 20
)

// hoursPerMonth is AWS's month of 730 hours.
var hoursPerMonth = month.Hours()

// BillLine is one resource's standing charge in an idle month.
type BillLine struct {
	Kind     string  `json:"kind"`
	Resource string  `json:"resource"` // the template's logical id, or a name
	Basis    string  `json:"basis"`    // what is priced: quantity × price
	USD      float64 `json:"usd_per_month"`
}

// IdleBill is what the idle dev environment costs a month: every resource of its template with a
// standing charge, and the consumer as measured.
type IdleBill struct {
	Template string     `json:"template"`
	Note     string     `json:"note,omitempty"`
	Lines    []BillLine `json:"lines"`
	Total    float64    `json:"usd_per_month"`
}

// template is a CloudFormation template, as far as the bill reads it.
type template struct {
	name      string              // its stack, such as atf-dev-batch; empty in tests
	Resources map[string]resource `json:"Resources"`
}

// stacks are the templates of one environment: its core stack's first, then its lambda stacks'
// (the queues, workers, status functions and alarms live there).
type stacks []*template

// loadStacks reads the core template at path (cdk.out/atf-dev.template.json) and the lambda
// stacks' beside it (cdk.out/atf-dev-*.template.json).
func loadStacks(path string) (stacks, error) {
	core, err := loadTemplate(path)
	if err != nil {
		return nil, err
	}
	env := stacks{core}
	others, err := filepath.Glob(strings.TrimSuffix(path, ".template.json") + "-*.template.json")
	if err != nil {
		return nil, err
	}
	slices.Sort(others)
	for _, o := range others {
		t, err := loadTemplate(o)
		if err != nil {
			return nil, err
		}
		env = append(env, t)
	}
	return env, nil
}

type resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
}

func loadTemplate(path string) (*template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no template to bill (make synth writes it): %w", err)
	}
	t, err := parseTemplate(data)
	if t != nil {
		t.name = strings.TrimSuffix(filepath.Base(path), ".template.json")
	}
	return t, err
}

func parseTemplate(data []byte) (*template, error) {
	var t template
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return &t, nil
}

// ids are the template's logical ids in order: the bill lists resources the same way each time.
func (t *template) ids(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ref is the logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} names, or "".
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		id, _ := ga[0].(string)
		return id
	}
	return ""
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

func str(v any) string { s, _ := v.(string); return s }

// consumerFunction is the logical id of the function that a schedule rule starts: the consumer.
func (t *template) consumerFunction() (fn, rule string) {
	for _, id := range t.ids("AWS::Events::Rule") {
		r := t.Resources[id]
		if str(r.Properties["ScheduleExpression"]) == "" {
			continue
		}
		targets, _ := r.Properties["Targets"].([]any)
		for _, target := range targets {
			m, _ := target.(map[string]any)
			if f := ref(m["Arn"]); t.Resources[f].Type == "AWS::Lambda::Function" {
				return f, id
			}
		}
	}
	return "", ""
}

var rateExpr = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// consumer is the consumer function's memory and how often its rule starts it.
func (t *template) consumer() (memoryMB int, period time.Duration, err error) {
	fn, rule := t.consumerFunction()
	if fn == "" {
		return 0, 0, fmt.Errorf("template: no function that a schedule rule starts")
	}
	mem, ok := number(t.Resources[fn].Properties["MemorySize"])
	if !ok {
		mem = 128 // Lambda's default
	}
	expr := str(t.Resources[rule].Properties["ScheduleExpression"])
	m := rateExpr.FindStringSubmatch(expr)
	if m == nil {
		return 0, 0, fmt.Errorf("template: schedule %q of rule %s: only rate() is priced", expr, rule)
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
	return int(mem), time.Duration(n) * unit, nil
}

// idleBill prices the standing charges of every template of env (none: none known) and the idle
// consumer of its core.
func idleBill(env stacks, idle IdleResult) IdleBill {
	var b IdleBill
	dashboards := 0
	for _, t := range env {
		// Logical ids repeat across stacks: a line names its stack too.
		add := func(kind, id, basis string, usd float64) {
			if t.name != "" {
				id = t.name + "/" + id
			}
			b.Lines = append(b.Lines, BillLine{Kind: kind, Resource: id, Basis: basis, USD: usd})
		}
		perHour := func(kind, id string, n, price float64, unit string) {
			add(kind, id, fmt.Sprintf("%s %s × %.0f h × $%g", trim(n), unit, hoursPerMonth, price), n*hoursPerMonth*price)
		}
		for _, id := range t.ids("AWS::EC2::NatGateway") {
			perHour("NAT gateway", id, 1, NATGatewayPerHour, "gateway")
		}
		for _, id := range t.ids("AWS::EC2::VPCEndpoint") {
			p := t.Resources[id].Properties
			if typ := str(p["VpcEndpointType"]); typ == "" || typ == "Gateway" {
				continue // free
			}
			subnets, _ := p["SubnetIds"].([]any)
			perHour("interface endpoint "+endpointService(p["ServiceName"]), id, float64(max(len(subnets), 1)), InterfaceEndpointPerAZHour, "AZ")
		}
		for _, id := range t.ids("AWS::EC2::EIP") {
			perHour("public IPv4 address", id, 1, PublicIPv4PerHour, "address")
		}
		b.fargate(t, perHour)
		b.alarms(t, add)
		for _, id := range t.ids("AWS::CloudWatch::Dashboard") {
			if dashboards++; dashboards <= CloudWatchFreeDashboards {
				add("dashboard", id, fmt.Sprintf("one of the free %d", CloudWatchFreeDashboards), 0)
				continue
			}
			add("dashboard", id, fmt.Sprintf("1 × $%g", CloudWatchDashboardPerMonth), CloudWatchDashboardPerMonth)
		}
		for _, typ := range []string{"AWS::KMS::Key", "AWS::KMS::ReplicaKey"} {
			for _, id := range t.ids(typ) {
				add("KMS key", id, fmt.Sprintf("1 × $%g", KMSKeyPerMonth), KMSKeyPerMonth)
			}
		}
		for _, id := range t.ids("AWS::SecretsManager::Secret") {
			add("secret", id, fmt.Sprintf("1 × $%g", SecretPerMonth), SecretPerMonth)
		}
		for _, id := range t.ids("AWS::DynamoDB::Table") {
			if wcu, rcu, indexes, ok := provisionedThroughput(t.Resources[id].Properties); ok {
				add("provisioned capacity", id, fmt.Sprintf("the table and %d indexes at their minimum: %s WCU × %.0f h × $%g + %s RCU × %.0f h × $%g",
					indexes, trim(wcu), hoursPerMonth, cost.DynamoDBWCUHour, trim(rcu), hoursPerMonth, cost.DynamoDBRCUHour),
					(wcu*cost.DynamoDBWCUHour+rcu*cost.DynamoDBRCUHour)*hoursPerMonth)
			}
		}
		b.polls(t, add)
		b.drains(t, add)
	}
	b.containerInsights(env)
	var core *template
	if len(env) > 0 {
		core = env[0]
	}
	b.consumer(core, idle, func(kind, id, basis string, usd float64) {
		b.Lines = append(b.Lines, BillLine{Kind: kind, Resource: id, Basis: basis, USD: usd})
	})
	for _, l := range b.Lines {
		b.Total += l.USD
	}
	return b
}

// provisionedThroughput adds up the capacity units a table of provisioned capacity holds however
// idle, its own and its indexes': the template's, where the stack starts them at their auto
// scaling minimum. ok is false for a table billed on demand, which costs nothing idle. (No
// BillingMode is CloudFormation's default, PROVISIONED.)
func provisionedThroughput(p map[string]any) (wcu, rcu float64, indexes int, ok bool) {
	if mode := str(p["BillingMode"]); mode != "" && mode != "PROVISIONED" {
		return 0, 0, 0, false
	}
	add := func(v any) {
		pt, _ := v.(map[string]any)
		w, _ := number(pt["WriteCapacityUnits"])
		r, _ := number(pt["ReadCapacityUnits"])
		wcu, rcu = wcu+w, rcu+r
	}
	add(p["ProvisionedThroughput"])
	gsis, _ := p["GlobalSecondaryIndexes"].([]any)
	for _, g := range gsis {
		m, _ := g.(map[string]any)
		add(m["ProvisionedThroughput"])
	}
	return wcu, rcu, len(gsis), true
}

// endpointService is the last word of an endpoint's service name (com.amazonaws.<region>.sqs).
func endpointService(v any) string {
	if m, ok := v.(map[string]any); ok {
		if parts, ok := m["Fn::Join"].([]any); ok && len(parts) == 2 {
			list, _ := parts[1].([]any)
			if len(list) > 0 {
				v = list[len(list)-1]
			}
		}
	}
	s := str(v)
	return s[strings.LastIndex(s, ".")+1:]
}

// idleTasks is how many tasks each ECS service of t runs while nothing happens (services that
// run none are left out), by logical id: its scaling target's MinCapacity, or its DesiredCount
// without one.
func (t *template) idleTasks() map[string]float64 {
	minimum := map[string]float64{}
	for _, id := range t.ids("AWS::ApplicationAutoScaling::ScalableTarget") {
		p := t.Resources[id].Properties
		if str(p["ServiceNamespace"]) != "ecs" {
			continue
		}
		if n, ok := number(p["MinCapacity"]); ok {
			for _, svc := range refsIn(p["ResourceId"]) {
				if t.Resources[svc].Type == "AWS::ECS::Service" {
					minimum[svc] = n
				}
			}
		}
	}
	idle := map[string]float64{}
	for _, id := range t.ids("AWS::ECS::Service") {
		n, scaled := minimum[id]
		if !scaled {
			n, _ = number(t.Resources[id].Properties["DesiredCount"])
		}
		if n > 0 {
			idle[id] = n
		}
	}
	return idle
}

// fargate bills the Fargate tasks that run while nothing happens (idleTasks), and their public
// addresses.
func (b *IdleBill) fargate(t *template, perHour func(kind, id string, n, price float64, unit string)) {
	idle := t.idleTasks()
	for _, id := range t.ids("AWS::ECS::Service") {
		p := t.Resources[id].Properties
		n := idle[id]
		if n == 0 {
			continue
		}
		td := t.Resources[ref(p["TaskDefinition"])].Properties
		cpu, _ := number(td["Cpu"])
		mem, _ := number(td["Memory"])
		vcpu, gb := cpu/1024, mem/1024
		vcpuPrice, gbPrice := FargateX86VCPUPerHour, FargateX86GBPerHour
		if rp, _ := td["RuntimePlatform"].(map[string]any); str(rp["CpuArchitecture"]) == "ARM64" {
			vcpuPrice, gbPrice = FargateArmVCPUPerHour, FargateArmGBPerHour
		}
		perHour(fmt.Sprintf("Fargate tasks (%g vCPU, %g GB)", vcpu, gb), id, n, vcpu*vcpuPrice+gb*gbPrice, "task")
		if nc, _ := p["NetworkConfiguration"].(map[string]any); nc != nil {
			if aws, _ := nc["AwsvpcConfiguration"].(map[string]any); str(aws["AssignPublicIp"]) == "ENABLED" {
				perHour("public IPv4 address of Fargate tasks", id, n, PublicIPv4PerHour, "address")
			}
		}
	}
}

// containerInsights bills Container Insights where the environment's cluster has it on: the
// metrics of the services that run tasks while idle, of their task families and of the cluster.
// Executors that scale to zero make none while idle; a line of $0 says so.
func (b *IdleBill) containerInsights(env stacks) {
	var cluster string
	for _, t := range env {
		for _, id := range t.ids("AWS::ECS::Cluster") {
			settings, _ := t.Resources[id].Properties["ClusterSettings"].([]any)
			for _, s := range settings {
				m, _ := s.(map[string]any)
				if str(m["Name"]) == "containerInsights" && (str(m["Value"]) == "enabled" || str(m["Value"]) == "enhanced") {
					cluster = qualified(t, id)
				}
			}
		}
	}
	if cluster == "" {
		return
	}
	const kind = "Container Insights metrics"
	running := false
	for _, t := range env {
		for _, id := range slices.Sorted(maps.Keys(t.idleTasks())) {
			running = true
			n := float64(ContainerInsightsServiceMetrics + ContainerInsightsTaskFamilyMetrics)
			b.Lines = append(b.Lines, BillLine{Kind: kind, Resource: qualified(t, id),
				Basis: fmt.Sprintf("%d of the service + %d of its task family × $%g", ContainerInsightsServiceMetrics, ContainerInsightsTaskFamilyMetrics, CloudWatchCustomMetricPerMonth),
				USD:   n * CloudWatchCustomMetricPerMonth})
		}
	}
	if !running {
		b.Lines = append(b.Lines, BillLine{Kind: kind, Resource: cluster, Basis: "no task runs while idle: billed only for the hours one runs"})
		return
	}
	b.Lines = append(b.Lines, BillLine{Kind: kind, Resource: cluster,
		Basis: fmt.Sprintf("%d of the cluster × $%g", ContainerInsightsClusterMetrics, CloudWatchCustomMetricPerMonth),
		USD:   ContainerInsightsClusterMetrics * CloudWatchCustomMetricPerMonth})
}

// qualified is a logical id of t named with its stack, as the bill's lines name resources.
func qualified(t *template, id string) string {
	if t.name != "" {
		return t.name + "/" + id
	}
	return id
}

// refsIn are the logical ids that v refers to, however deep.
func refsIn(v any) []string {
	var ids []string
	switch x := v.(type) {
	case map[string]any:
		if id := ref(x); id != "" {
			return []string{id}
		}
		for _, w := range x {
			ids = append(ids, refsIn(w)...)
		}
	case []any:
		for _, w := range x {
			ids = append(ids, refsIn(w)...)
		}
	}
	return ids
}

// alarms bills each alarm by the metrics it watches.
func (b *IdleBill) alarms(t *template, add func(kind, id, basis string, usd float64)) {
	for _, id := range t.ids("AWS::CloudWatch::Alarm") {
		p := t.Resources[id].Properties
		metrics, highRes := 1.0, false
		if period, ok := number(p["Period"]); ok && period < cloudWatchHighResolutionPeriodSeconds {
			highRes = true
		}
		if list, ok := p["Metrics"].([]any); ok {
			metrics = 0
			for _, m := range list {
				q, _ := m.(map[string]any)
				if stat, ok := q["MetricStat"].(map[string]any); ok {
					metrics++
					if period, ok := number(stat["Period"]); ok && period < cloudWatchHighResolutionPeriodSeconds {
						highRes = true
					}
				}
			}
		}
		price := CloudWatchAlarmPerMetricMonth
		if highRes {
			price = CloudWatchHighResAlarmPerMetricMonth
		}
		add("alarm", id, fmt.Sprintf("%s metrics × $%g", trim(metrics), price), metrics*price)
	}
}

// polls bills the idle polling of each SQS event source mapping, per queue.
func (b *IdleBill) polls(t *template, add func(kind, id, basis string, usd float64)) {
	pollsPerMonth := ESMIdlePollers * hoursPerMonth * 3600 / SQSLongPollWaitSeconds
	for _, id := range t.ids("AWS::Lambda::EventSourceMapping") {
		q := ref(t.Resources[id].Properties["EventSourceArn"])
		if t.Resources[q].Type != "AWS::SQS::Queue" {
			continue
		}
		name := str(t.Resources[q].Properties["QueueName"])
		if name == "" {
			name = q
		}
		add("idle SQS polls of an event source mapping", name,
			fmt.Sprintf("%s requests × $%g/M", num(pollsPerMonth), cost.SQSStandardPerMillion), pollsPerMonth*cost.SQSStandardPerMillion/1e6)
	}
}

// drains bills the consumer's drain of each dead-letter queue (consumer.Drain): one receive per
// queue every consumer.DefaultDrainInterval when the queue is empty.
func (b *IdleBill) drains(t *template, add func(kind, id, basis string, usd float64)) {
	receives := hoursPerMonth * 3600 / consumer.DefaultDrainInterval.Seconds()
	for _, id := range t.ids("AWS::SQS::Queue") {
		name := str(t.Resources[id].Properties["QueueName"])
		if !strings.HasSuffix(name, sqsqueue.DLQSuffix) {
			continue
		}
		add("idle receives of the dead-letter drain", name,
			fmt.Sprintf("%s requests × $%g/M", num(receives), cost.SQSStandardPerMillion), receives*cost.SQSStandardPerMillion/1e6)
	}
}

// consumer bills the idle consumer as measured, and the storage of its logs at its log group's
// retention.
func (b *IdleBill) consumer(t *template, idle IdleResult, add func(kind, id, basis string, usd float64)) {
	name := "consumer"
	retention := 0.0 // days; 0: never expires
	if t != nil {
		if fn, _ := t.consumerFunction(); fn != "" {
			name = fn
			lc, _ := t.Resources[fn].Properties["LoggingConfig"].(map[string]any)
			if g := t.Resources[ref(lc["LogGroup"])]; g.Type == "AWS::Logs::LogGroup" {
				retention, _ = number(g.Properties["RetentionInDays"])
			}
		}
	}
	u := idle.Usage
	fn := u.Lambda["consumer"]
	add("consumer invocations", name, fmt.Sprintf("%s invocations of %.0f ms at %d MB (%s GB-s)",
		num(fn.Invocations), idle.InvocationMS, idle.MemoryMB, num(fn.GBSeconds)),
		fn.Invocations*cost.LambdaRequestsPerMillion/1e6+fn.GBSeconds*cost.LambdaArmPerGBSecond)
	add("consumer reads", name, fmt.Sprintf("%s read units (%.1f an invocation) × $%g/M",
		num(u.ReadUnits), u.ReadUnits/max(fn.Invocations, 1), cost.DynamoDBReadPerMillion), u.ReadUnits*cost.DynamoDBReadPerMillion/1e6)
	if u.EventBridgeEvents > 0 && cost.EventBridgeScheduledRulePerMillion > 0 {
		add("consumer schedule", name, fmt.Sprintf("%s events", num(u.EventBridgeEvents)), u.EventBridgeEvents*cost.EventBridgeScheduledRulePerMillion/1e6)
	}
	gb := u.LogBytes / (1 << 30)
	add("consumer log ingestion", name, fmt.Sprintf("%.4f GB × $%g", gb, cost.CloudWatchLogsPerGB), gb*cost.CloudWatchLogsPerGB)
	months := retention / 30.4
	kept := fmt.Sprintf("kept %.0f days", retention)
	if retention == 0 {
		months, kept = CloudWatchLogsRetentionUnsetMonths, fmt.Sprintf("never expires: %d months' worth", CloudWatchLogsRetentionUnsetMonths)
	}
	add("log storage", name, fmt.Sprintf("%.4f GB-months (%s) × $%g", gb*months, kept, CloudWatchLogsStoragePerGBMonth),
		gb*months*CloudWatchLogsStoragePerGBMonth)
}

// trim formats a count without needless decimals.
func trim(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Print writes the bill as a markdown table.
func (b *IdleBill) Print(w io.Writer, idle *IdleResult) {
	src := b.Template
	if b.Note != "" {
		src = b.Note
	}
	fmt.Fprintf(w, "Idle dev environment, per month: the standing charges of %s, and the consumer function", src)
	if idle != nil {
		fmt.Fprintf(w, " as measured on the emulators (%d lambdas, %d queues, %d shards; %.1f passes an invocation)", len(idle.Lambdas), idle.Priorities, idle.Shards, idle.PassesPerInvocation)
	}
	fmt.Fprintf(w, "; list prices checked %s\n\n", IdlePricesChecked)
	fmt.Fprintln(w, "| resource | name | basis | per month |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, l := range b.Lines {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", l.Kind, l.Resource, l.Basis, usd(l.USD))
	}
	fmt.Fprintf(w, "| **total** | | | **%s** |\n\n", usd(b.Total))
}
