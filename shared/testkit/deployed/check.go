package deployed

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// notApplied are the resource types of atf's templates that moto 5.2.5's CloudFormation does
// not create (it records them in the stack without a type or physical id, and goes on). The
// check counts them and verifies nothing of them; if the stack does hold one, the list is out of
// date and the check fails.
var notApplied = map[string]string{
	"AWS::SQS::QueuePolicy": "moto does not create queue policies: the stack's deny of requests without TLS is not applied",
	"AWS::ApiGatewayV2::Api": "moto's CloudFormation implements no API Gateway v2 (HTTP API) resource: no API is created, " +
		"and the ApiUrl output reads https://None.execute-api...",
	"AWS::ApiGatewayV2::Route":       "no API Gateway v2 in moto's CloudFormation: the routes are not created",
	"AWS::ApiGatewayV2::Integration": "no API Gateway v2 in moto's CloudFormation: the API function's integration is not created",
	"AWS::ApiGatewayV2::Stage":       "no API Gateway v2 in moto's CloudFormation: the $default stage (throttling, access logs) is not created",
	"AWS::Lambda::EventInvokeConfig": "moto does not create it: the consumer's setting that drops stale schedule events is not applied",
	"AWS::Logs::MetricFilter":        "moto does not create metric filters",
	"AWS::CloudWatch::Alarm":         "moto's CloudFormation does not create alarms",
	"AWS::SNS::Subscription":         "moto's CloudFormation does not create subscriptions",
}

// notVerified are the resource types that moto creates and the check leaves alone, with why.
var notVerified = map[string]string{
	"AWS::CDK::Metadata": "CDK's record of the construct library versions it used, not a resource of AWS",
}

// listedOnly are the resource types that moto creates and the check only finds in the stack,
// not through their own API, with why.
var listedOnly = map[string]string{
	"AWS::CloudWatch::Dashboard": "moto creates it, but answers the Go SDK's CloudWatch client (its RPC v2 CBOR protocol) " +
		"with 404: the check sees only that the stack lists it",
}

// emulatorDifferences are settings that moto 5.2.5 creates otherwise than the template says.
// The check reports each when it meets it, and fails on any other difference.
var emulatorDifferences = map[string]string{
	"architecture": "moto reports every function as x86_64; the template says arm64",
	"logging":      "moto ignores a function's LoggingConfig (its log group): GetFunction returns none",
	"ttl":          "moto's CloudFormation leaves the table's TTL disabled; the template enables it on expires",
}

// Clients are the AWS API clients the check calls.
type Clients struct {
	CloudFormation *cloudformation.Client
	DynamoDB       *dynamodb.Client
	SQS            *sqs.Client
	Lambda         *lambda.Client
	EventBridge    *eventbridge.Client
	IAM            *iam.Client
	Logs           *cloudwatchlogs.Client
	SSM            *ssm.Client
}

// NewClients returns clients of cfg (its endpoint from AWS_ENDPOINT_URL, as the SDK reads it).
func NewClients(cfg aws.Config) *Clients {
	return &Clients{
		CloudFormation: cloudformation.NewFromConfig(cfg),
		DynamoDB:       dynamodb.NewFromConfig(cfg),
		SQS:            sqs.NewFromConfig(cfg),
		Lambda:         lambda.NewFromConfig(cfg),
		EventBridge:    eventbridge.NewFromConfig(cfg),
		IAM:            iam.NewFromConfig(cfg),
		Logs:           cloudwatchlogs.NewFromConfig(cfg),
		SSM:            ssm.NewFromConfig(cfg),
	}
}

// Report is the outcome of Check. Problems empty means the stack passed.
type Report struct {
	Verified    []string // a line per resource checked: type, logical id, physical id
	NotApplied  []string // a line per type of notApplied the template has: how many, and why
	NotVerified []string // the same for notVerified
	Differences []string // the emulatorDifferences met
	Problems    []string
}

// OK says whether the stack passed.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// callTimeout bounds each resource's calls.
const callTimeout = 15 * time.Second

// checkFunc verifies one resource, whose physical id is phys, and returns its problems.
type checkFunc func(ctx context.Context, c *checker, id string, r TemplateResource, phys string) []string

// checks are the resource types the check verifies through the AWS API.
var checks = map[string]checkFunc{
	"AWS::DynamoDB::Table":            checkTable,
	"AWS::SQS::Queue":                 checkQueue,
	"AWS::Lambda::Function":           checkFunction,
	"AWS::Lambda::EventSourceMapping": checkEventSourceMapping,
	"AWS::Lambda::Permission":         checkPermission,
	"AWS::Events::Rule":               checkRule,
	"AWS::IAM::Role":                  checkRole,
	"AWS::IAM::Policy":                checkPolicy,
	"AWS::Logs::LogGroup":             checkLogGroup,
	"AWS::SSM::Parameter":             checkParameter,
}

type checker struct {
	aws    *Clients
	tpl    *Template
	st     *Stack
	report *Report
	met    map[string]bool // emulatorDifferences reported
}

// Check verifies st, as deployed, against the template it was deployed from. Every resource
// type of the template must be in checks, notApplied or notVerified; every resource of a type
// in checks must be in the stack, and be as the template says.
func Check(ctx context.Context, clients *Clients, tpl *Template, st *Stack) *Report {
	c := &checker{aws: clients, tpl: tpl, st: st, report: &Report{}, met: map[string]bool{}}
	byType := map[string][]string{}
	for id, r := range tpl.Resources {
		byType[r.Type] = append(byType[r.Type], id)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		ids := byType[typ]
		slices.Sort(ids)
		if why, ok := notApplied[typ]; ok {
			c.report.NotApplied = append(c.report.NotApplied, fmt.Sprintf("%s (%d): %s", typ, len(ids), why))
			for _, id := range ids {
				if r, ok := st.Resources[id]; ok && r.Type == typ {
					c.problem("%s %s was created (%s): the emulator now applies %s, so check it rather than list it as not applied", typ, id, r.PhysicalID, typ)
				}
			}
			continue
		}
		if why, ok := notVerified[typ]; ok {
			c.report.NotVerified = append(c.report.NotVerified, fmt.Sprintf("%s (%d): %s", typ, len(ids), why))
			continue
		}
		check, ok := checks[typ]
		if why, listed := listedOnly[typ]; listed {
			c.report.NotVerified = append(c.report.NotVerified, fmt.Sprintf("%s (%d), found in the stack only: %s", typ, len(ids), why))
			check, ok = func(context.Context, *checker, string, TemplateResource, string) []string { return nil }, true
		}
		if !ok {
			c.problem("%s (%s): a resource type the check does not know: verify it, or name it in notApplied or notVerified with the reason", typ, strings.Join(ids, ", "))
			continue
		}
		for _, id := range ids {
			got, ok := st.Resources[id]
			switch {
			case !ok:
				c.problem("%s %s: not in stack %s", typ, id, st.Name)
				continue
			case got.Type != typ:
				c.problem("%s %s: the stack has it as %s", typ, id, got.Type)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, callTimeout)
			problems := check(rctx, c, id, tpl.Resources[id], got.PhysicalID)
			cancel()
			for _, p := range problems {
				c.problem("%s %s (%s): %s", typ, id, got.PhysicalID, p)
			}
			if len(problems) == 0 {
				c.report.Verified = append(c.report.Verified, fmt.Sprintf("%s %s: %s", typ, id, got.PhysicalID))
			}
		}
	}
	c.checkOutputs()
	return c.report
}

func (c *checker) problem(format string, args ...any) {
	c.report.Problems = append(c.report.Problems, fmt.Sprintf(format, args...))
}

// differ records that the emulator applied a setting otherwise than AWS would, as known.
func (c *checker) differ(key string) {
	if !c.met[key] {
		c.met[key] = true
		c.report.Differences = append(c.report.Differences, emulatorDifferences[key])
	}
}

// checkOutputs: every output is in the stack with the value the template gives it (matches);
// one built from a resource the emulator did not create is reported.
func (c *checker) checkOutputs() {
	for _, key := range slices.Sorted(maps.Keys(c.tpl.Outputs)) {
		v := c.tpl.Outputs[key].Value
		got, ok := c.st.Outputs[key]
		if !ok {
			c.problem("output %s: not in stack %s", key, c.st.Name)
			continue
		}
		if s, ok := v.(string); ok {
			if got != s {
				c.problem("output %s is %q, want %q", key, got, s)
			}
			continue
		}
		if !c.matches(got, v) {
			c.problem("output %s is %q, not what the template makes it: %v", key, got, v)
		}
		for _, id := range refs(v) {
			if typ := c.tpl.Resources[id].Type; notApplied[typ] != "" {
				c.report.NotApplied = append(c.report.NotApplied, fmt.Sprintf("output %s (%s) is built from %s, which was not created", key, got, id))
			}
		}
	}
}

// ---------------------------------------------------------------------------- template values

// target returns the logical id that v names ({"Ref": id}, or {"Fn::GetAtt": [id, attr]} with
// its attribute), or "".
func target(v any) (id, attr string) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r, ""
	}
	if g, ok := m["Fn::GetAtt"].([]any); ok && len(g) == 2 {
		id, _ := g[0].(string)
		attr, _ := g[1].(string)
		return id, attr
	}
	return "", ""
}

// refs returns every logical id v refers to, anywhere inside it.
func refs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if id, _ := target(v); id != "" {
			out = append(out, id)
		}
		for _, x := range v {
			out = append(out, refs(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, refs(x)...)
		}
	}
	return out
}

// names says whether got, a name or an ARN or a queue URL, names the resource that the template
// value want refers to (Ref or Fn::GetAtt ... Arn).
func (c *checker) names(got string, want any) bool {
	id, _ := target(want)
	phys := c.st.Physical(id)
	if id == "" || phys == "" {
		return false
	}
	name := phys[strings.LastIndex(phys, "/")+1:] // a queue's URL ends with its name
	return got == phys || got == name || strings.HasSuffix(got, ":"+name) || strings.HasSuffix(got, "/"+name)
}

// matches says whether got is the deployed value of the template value want: a literal, a
// resource named by Ref or Fn::GetAtt (see names), or an Fn::Join of these, where a pseudo
// parameter (AWS::Partition, ...) or a resource that was not created matches anything.
func (c *checker) matches(got string, want any) bool {
	if s, ok := want.(string); ok {
		return got == s
	}
	if id, _ := target(want); id != "" {
		return c.names(got, want)
	}
	re, ok := c.joinPattern(want)
	return ok && re.MatchString(got)
}

// joinPattern returns the regular expression of the values an Fn::Join can take once deployed.
func (c *checker) joinPattern(v any) (*regexp.Regexp, bool) {
	m, _ := v.(map[string]any)
	j, _ := m["Fn::Join"].([]any)
	if len(j) != 2 {
		return nil, false
	}
	sep, _ := j[0].(string)
	var parts []string
	for _, part := range listOf(j[1]) {
		if s, ok := part.(string); ok {
			parts = append(parts, regexp.QuoteMeta(s))
			continue
		}
		id, attr := target(part)
		switch phys := c.st.Physical(id); {
		case id == "":
			return nil, false
		case strings.HasPrefix(id, "AWS::") || phys == "":
			parts = append(parts, ".*")
		case attr == "":
			parts = append(parts, regexp.QuoteMeta(phys))
		default: // an attribute such as an ARN: it ends with the physical name
			parts = append(parts, ".*"+regexp.QuoteMeta(phys[strings.LastIndex(phys, "/")+1:]))
		}
	}
	return regexp.MustCompile("^" + strings.Join(parts, regexp.QuoteMeta(sep)) + "$"), true
}

// resolve returns a template value as the deployed resource has it: a literal as a string, a Ref
// as the physical id it names; ok is false for anything else (an ARN, a join).
func (c *checker) resolve(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	}
	if id, attr := target(v); id != "" && attr == "" {
		return c.st.Physical(id), true
	}
	return "", false
}

// intProp returns the integer property key, and whether the template sets it.
func intProp(p map[string]any, key string) (int, bool) {
	switch v := p[key].(type) {
	case float64:
		return int(v), true
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

func strProp(p map[string]any, key string) (string, bool) {
	s, ok := p[key].(string)
	return s, ok
}

func mapProp(p map[string]any, key string) map[string]any {
	m, _ := p[key].(map[string]any)
	return m
}

func listProp(p map[string]any, key string) []any {
	l, _ := p[key].([]any)
	return l
}

// compare appends a problem to ps if the template sets key and got differs.
func compareInt(ps *[]string, p map[string]any, key string, got int) {
	if want, ok := intProp(p, key); ok && want != got {
		*ps = append(*ps, fmt.Sprintf("%s is %d, want %d", key, got, want))
	}
}

func compareStr(ps *[]string, p map[string]any, key, got string) {
	if want, ok := strProp(p, key); ok && want != got {
		*ps = append(*ps, fmt.Sprintf("%s is %q, want %q", key, got, want))
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func strs(l []any) []string {
	var out []string
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// --------------------------------------------------------------------------------------- table

func checkTable(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	out, err := c.aws.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	t := out.Table
	compareStr(&ps, p, "TableName", aws.ToString(t.TableName))
	keys := func(l []any) string {
		var s []string
		for _, k := range l {
			k, _ := k.(map[string]any)
			s = append(s, fmt.Sprint(k["AttributeName"], "/", k["KeyType"]))
		}
		return strings.Join(s, ",")
	}
	if want, got := keys(listProp(p, "KeySchema")), keySchema(t.KeySchema); want != got {
		ps = append(ps, fmt.Sprintf("key schema %s, want %s", got, want))
	}
	var wantAttrs, gotAttrs []string
	for _, a := range listProp(p, "AttributeDefinitions") {
		a, _ := a.(map[string]any)
		wantAttrs = append(wantAttrs, fmt.Sprint(a["AttributeName"], ":", a["AttributeType"]))
	}
	for _, a := range t.AttributeDefinitions {
		gotAttrs = append(gotAttrs, aws.ToString(a.AttributeName)+":"+string(a.AttributeType))
	}
	if !sameSet(wantAttrs, gotAttrs) {
		ps = append(ps, fmt.Sprintf("attributes %v, want %v", gotAttrs, wantAttrs))
	}
	if want, ok := strProp(p, "BillingMode"); ok {
		got := ""
		if t.BillingModeSummary != nil {
			got = string(t.BillingModeSummary.BillingMode)
		}
		if got != want {
			ps = append(ps, fmt.Sprintf("billing mode %q, want %q", got, want))
		}
	}
	gotGSI := map[string]string{}
	for _, g := range t.GlobalSecondaryIndexes {
		proj := ""
		if g.Projection != nil {
			na := slices.Clone(g.Projection.NonKeyAttributes)
			slices.Sort(na)
			proj = string(g.Projection.ProjectionType) + fmt.Sprint(na)
		}
		gotGSI[aws.ToString(g.IndexName)] = keySchema(g.KeySchema) + " " + proj
	}
	wantGSI := map[string]string{}
	for _, g := range listProp(p, "GlobalSecondaryIndexes") {
		g, _ := g.(map[string]any)
		proj := mapProp(g, "Projection")
		na := strs(listProp(proj, "NonKeyAttributes"))
		slices.Sort(na)
		wantGSI[fmt.Sprint(g["IndexName"])] = keys(listProp(g, "KeySchema")) + " " + fmt.Sprint(proj["ProjectionType"]) + fmt.Sprint(na)
	}
	if !maps.Equal(gotGSI, wantGSI) {
		ps = append(ps, fmt.Sprintf("global secondary indexes %v, want %v", gotGSI, wantGSI))
	}
	if want, ok := p["DeletionProtectionEnabled"].(bool); ok && want != aws.ToBool(t.DeletionProtectionEnabled) {
		ps = append(ps, fmt.Sprintf("deletion protection %v, want %v", !want, want))
	}
	if ttl := mapProp(p, "TimeToLiveSpecification"); ttl != nil {
		out, err := c.aws.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(phys)})
		switch {
		case err != nil:
			ps = append(ps, "time to live: "+err.Error())
		case ttl["Enabled"] == true && out.TimeToLiveDescription.TimeToLiveStatus == "DISABLED":
			c.differ("ttl")
		case ttl["Enabled"] == true && aws.ToString(out.TimeToLiveDescription.AttributeName) != ttl["AttributeName"]:
			ps = append(ps, fmt.Sprintf("time to live on %q, want %q", aws.ToString(out.TimeToLiveDescription.AttributeName), ttl["AttributeName"]))
		}
	}
	if pitr := mapProp(p, "PointInTimeRecoverySpecification"); pitr != nil {
		out, err := c.aws.DynamoDB.DescribeContinuousBackups(ctx, &dynamodb.DescribeContinuousBackupsInput{TableName: aws.String(phys)})
		if err != nil {
			ps = append(ps, "continuous backups: "+err.Error())
		} else if d := out.ContinuousBackupsDescription; d == nil || d.PointInTimeRecoveryDescription == nil {
			ps = append(ps, "no point-in-time recovery status")
		} else if got := d.PointInTimeRecoveryDescription.PointInTimeRecoveryStatus == "ENABLED"; got != (pitr["PointInTimeRecoveryEnabled"] == true) {
			ps = append(ps, fmt.Sprintf("point-in-time recovery %v, want %v", got, pitr["PointInTimeRecoveryEnabled"]))
		}
	}
	return ps
}

func keySchema(ks []ddbtypes.KeySchemaElement) string {
	var s []string
	for _, k := range ks {
		s = append(s, aws.ToString(k.AttributeName)+"/"+string(k.KeyType))
	}
	return strings.Join(s, ",")
}
