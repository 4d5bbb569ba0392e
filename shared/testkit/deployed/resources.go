package deployed

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// ---------------------------------------------------------------------------------------- queue

func checkQueue(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	name := phys[strings.LastIndex(phys, "/")+1:]
	compareStr(&ps, p, "QueueName", name)
	if prefix := c.st.QueuePrefix(); prefix != "" && !strings.HasPrefix(name, prefix+"-") {
		ps = append(ps, fmt.Sprintf("name %s is not under the stack's QueuePrefix %s", name, prefix))
	}
	out, err := c.aws.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(phys), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		return append(ps, err.Error())
	}
	a := out.Attributes
	for _, key := range []string{"VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds", "MaximumMessageSize"} {
		n, err := strconv.Atoi(a[key])
		if _, set := intProp(p, key); set && err != nil {
			ps = append(ps, fmt.Sprintf("%s is %q", key, a[key]))
			continue
		}
		compareInt(&ps, p, key, n)
	}
	if want, ok := p["SqsManagedSseEnabled"].(bool); ok && a["SqsManagedSseEnabled"] != strconv.FormatBool(want) {
		ps = append(ps, fmt.Sprintf("SqsManagedSseEnabled is %q, want %v", a["SqsManagedSseEnabled"], want))
	}
	want := mapProp(p, "RedrivePolicy")
	if want == nil {
		if a["RedrivePolicy"] != "" {
			ps = append(ps, "a redrive policy the template does not set: "+a["RedrivePolicy"])
		}
		return ps
	}
	var got struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     any    `json:"maxReceiveCount"` // a number, or a string on AWS
	}
	if err := json.Unmarshal([]byte(a["RedrivePolicy"]), &got); err != nil {
		return append(ps, fmt.Sprintf("redrive policy %q: %v", a["RedrivePolicy"], err))
	}
	if !c.names(got.DeadLetterTargetArn, want["deadLetterTargetArn"]) {
		id, _ := target(want["deadLetterTargetArn"])
		ps = append(ps, fmt.Sprintf("dead-letter queue %s, want %s (%s)", got.DeadLetterTargetArn, id, c.st.Physical(id)))
	}
	if w, ok := intProp(want, "maxReceiveCount"); ok && fmt.Sprint(got.MaxReceiveCount) != strconv.Itoa(w) {
		ps = append(ps, fmt.Sprintf("maxReceiveCount %v, want %d", got.MaxReceiveCount, w))
	}
	return ps
}

// ------------------------------------------------------------------------------------- function

func checkFunction(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	out, err := c.aws.Lambda.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	f := out.Configuration
	compareStr(&ps, p, "FunctionName", aws.ToString(f.FunctionName))
	compareStr(&ps, p, "Runtime", string(f.Runtime))
	compareStr(&ps, p, "Handler", aws.ToString(f.Handler))
	compareStr(&ps, p, "Description", aws.ToString(f.Description))
	compareInt(&ps, p, "MemorySize", int(aws.ToInt32(f.MemorySize)))
	compareInt(&ps, p, "Timeout", int(aws.ToInt32(f.Timeout)))
	if !c.names(aws.ToString(f.Role), p["Role"]) {
		ps = append(ps, fmt.Sprintf("role %s, want %v", aws.ToString(f.Role), p["Role"]))
	}
	if want := strs(listProp(p, "Architectures")); want != nil {
		var got []string
		for _, a := range f.Architectures {
			got = append(got, string(a))
		}
		switch {
		case sameSet(got, want):
		case slices.Equal(got, []string{"x86_64"}):
			c.differ("architecture")
		default:
			ps = append(ps, fmt.Sprintf("architectures %v, want %v", got, want))
		}
	}
	if lc := mapProp(p, "LoggingConfig"); lc != nil {
		if f.LoggingConfig == nil {
			c.differ("logging")
		} else if !c.names(aws.ToString(f.LoggingConfig.LogGroup), lc["LogGroup"]) {
			ps = append(ps, fmt.Sprintf("log group %s, want %v", aws.ToString(f.LoggingConfig.LogGroup), lc["LogGroup"]))
		}
	}
	// The environment: the same variables; a literal or a Ref has its value.
	wantEnv := mapProp(mapProp(p, "Environment"), "Variables")
	gotEnv := map[string]string{}
	if f.Environment != nil {
		gotEnv = f.Environment.Variables
	}
	var wantNames, gotNames []string
	for k, v := range wantEnv {
		wantNames = append(wantNames, k)
		if want, ok := c.resolve(v); ok && gotEnv[k] != want {
			ps = append(ps, fmt.Sprintf("%s=%q, want %q", k, gotEnv[k], want))
		}
	}
	for k := range gotEnv {
		gotNames = append(gotNames, k)
	}
	if !sameSet(wantNames, gotNames) {
		slices.Sort(gotNames)
		slices.Sort(wantNames)
		ps = append(ps, fmt.Sprintf("environment variables %v, want %v", gotNames, wantNames))
	}
	if want, ok := intProp(p, "ReservedConcurrentExecutions"); ok {
		out, err := c.aws.Lambda.GetFunctionConcurrency(ctx, &lambda.GetFunctionConcurrencyInput{FunctionName: aws.String(phys)})
		if err != nil {
			ps = append(ps, "reserved concurrency: "+err.Error())
		} else if got := int(aws.ToInt32(out.ReservedConcurrentExecutions)); got != want {
			ps = append(ps, fmt.Sprintf("reserved concurrency %d, want %d", got, want))
		}
	}
	return ps
}

func checkEventSourceMapping(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	m, err := c.aws.Lambda.GetEventSourceMapping(ctx, &lambda.GetEventSourceMappingInput{UUID: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	if !c.names(aws.ToString(m.FunctionArn), p["FunctionName"]) {
		ps = append(ps, fmt.Sprintf("function %s, want %v", aws.ToString(m.FunctionArn), p["FunctionName"]))
	}
	if !c.names(aws.ToString(m.EventSourceArn), p["EventSourceArn"]) {
		ps = append(ps, fmt.Sprintf("source %s, want %v", aws.ToString(m.EventSourceArn), p["EventSourceArn"]))
	}
	compareInt(&ps, p, "BatchSize", int(aws.ToInt32(m.BatchSize)))
	compareInt(&ps, p, "MaximumBatchingWindowInSeconds", int(aws.ToInt32(m.MaximumBatchingWindowInSeconds)))
	var types []string
	for _, t := range m.FunctionResponseTypes {
		types = append(types, string(t))
	}
	if want := strs(listProp(p, "FunctionResponseTypes")); !sameSet(types, want) {
		ps = append(ps, fmt.Sprintf("function response types %v, want %v", types, want))
	}
	if want, ok := intProp(mapProp(p, "ScalingConfig"), "MaximumConcurrency"); ok {
		got := 0
		if m.ScalingConfig != nil {
			got = int(aws.ToInt32(m.ScalingConfig.MaximumConcurrency))
		}
		if got != want {
			ps = append(ps, fmt.Sprintf("maximum concurrency %d, want %d", got, want))
		}
	}
	if enabled, ok := p["Enabled"].(bool); ok && (aws.ToString(m.State) == "Enabled") != enabled {
		ps = append(ps, fmt.Sprintf("state %s, want enabled %v", aws.ToString(m.State), enabled))
	}
	return ps
}

// checkPermission: the function's resource policy allows the principal the action, from the
// source the template names.
func checkPermission(ctx context.Context, c *checker, _ string, r TemplateResource, _ string) []string {
	p := r.Properties
	fn, _ := target(p["FunctionName"])
	out, err := c.aws.Lambda.GetPolicy(ctx, &lambda.GetPolicyInput{FunctionName: aws.String(c.st.Physical(fn))})
	if err != nil {
		return []string{fmt.Sprintf("policy of %s: %v", fn, err)}
	}
	var policy struct {
		Statement []struct {
			Action    any
			Principal struct{ Service string }
			Condition map[string]map[string]string
		}
	}
	if err := json.Unmarshal([]byte(aws.ToString(out.Policy)), &policy); err != nil {
		return []string{fmt.Sprintf("policy of %s: %v", fn, err)}
	}
	for _, s := range policy.Statement {
		if fmt.Sprint(s.Action) != p["Action"] || s.Principal.Service != p["Principal"] {
			continue
		}
		if p["SourceArn"] == nil || c.matches(s.Condition["ArnLike"]["AWS:SourceArn"], p["SourceArn"]) {
			return nil
		}
	}
	return []string{fmt.Sprintf("the policy of %s allows no %v by %v from %v: %s", fn, p["Action"], p["Principal"], p["SourceArn"], aws.ToString(out.Policy))}
}

// ----------------------------------------------------------------------------------------- rule

func checkRule(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	var bus *string
	if v, ok := c.resolve(p["EventBusName"]); ok && p["EventBusName"] != nil {
		bus = aws.String(v)
	}
	name := phys[strings.LastIndex(phys, "|")+1:] // on AWS, a rule of a bus other than default is <bus>|<name>
	out, err := c.aws.EventBridge.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name), EventBusName: bus})
	if err != nil {
		return []string{err.Error()}
	}
	compareStr(&ps, p, "ScheduleExpression", aws.ToString(out.ScheduleExpression))
	compareStr(&ps, p, "State", string(out.State))
	compareStr(&ps, p, "Description", aws.ToString(out.Description))
	if want, ok := p["EventPattern"]; ok {
		var got any
		if err := json.Unmarshal([]byte(aws.ToString(out.EventPattern)), &got); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			ps = append(ps, fmt.Sprintf("event pattern %s, want %v", aws.ToString(out.EventPattern), want))
		}
	}
	targets, err := c.aws.EventBridge.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name), EventBusName: bus})
	if err != nil {
		return append(ps, "targets: "+err.Error())
	}
	wantTargets := listProp(p, "Targets")
	if len(targets.Targets) != len(wantTargets) {
		ps = append(ps, fmt.Sprintf("%d targets, want %d", len(targets.Targets), len(wantTargets)))
	}
	for _, w := range wantTargets {
		w, _ := w.(map[string]any)
		found := false
		for _, t := range targets.Targets {
			if aws.ToString(t.Id) != w["Id"] {
				continue
			}
			found = true
			if !c.names(aws.ToString(t.Arn), w["Arn"]) {
				ps = append(ps, fmt.Sprintf("target %v is %s, want %v", w["Id"], aws.ToString(t.Arn), w["Arn"]))
			}
			if rp := mapProp(w, "RetryPolicy"); rp != nil {
				if t.RetryPolicy == nil {
					ps = append(ps, fmt.Sprintf("target %v has no retry policy", w["Id"]))
					continue
				}
				compareInt(&ps, rp, "MaximumRetryAttempts", int(aws.ToInt32(t.RetryPolicy.MaximumRetryAttempts)))
				compareInt(&ps, rp, "MaximumEventAgeInSeconds", int(aws.ToInt32(t.RetryPolicy.MaximumEventAgeInSeconds)))
			}
		}
		if !found {
			ps = append(ps, fmt.Sprintf("no target %v", w["Id"]))
		}
	}
	return ps
}

// ------------------------------------------------------------------------------------------ IAM

// policyDocument decodes an IAM policy document as the API returns it (URL-encoded JSON on AWS;
// plain on moto).
func policyDocument(s string) (map[string]any, error) {
	if u, err := url.QueryUnescape(s); err == nil && strings.HasPrefix(strings.TrimSpace(u), "{") {
		s = u
	}
	var doc map[string]any
	return doc, json.Unmarshal([]byte(s), &doc)
}

// services returns the service principals of a policy document, sorted.
func services(doc map[string]any) []string {
	var out []string
	for _, s := range listOf(doc["Statement"]) {
		s, _ := s.(map[string]any)
		for _, svc := range listOf(mapProp(s, "Principal")["Service"]) {
			out = append(out, fmt.Sprint(svc))
		}
	}
	slices.Sort(out)
	return out
}

// actions returns the actions a policy document allows or denies, sorted.
func actions(doc map[string]any) []string {
	var out []string
	for _, s := range listOf(doc["Statement"]) {
		s, _ := s.(map[string]any)
		for _, a := range listOf(s["Action"]) {
			out = append(out, fmt.Sprint(s["Effect"], " ", a))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func listOf(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	}
	return []any{v}
}

func checkRole(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	p := r.Properties
	out, err := c.aws.IAM.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	compareStr(&ps, p, "RoleName", aws.ToString(out.Role.RoleName))
	compareStr(&ps, p, "Description", aws.ToString(out.Role.Description))
	doc, err := policyDocument(aws.ToString(out.Role.AssumeRolePolicyDocument))
	if err != nil {
		return append(ps, "trust policy: "+err.Error())
	}
	want, _ := p["AssumeRolePolicyDocument"].(map[string]any)
	if got, want := services(doc), services(want); !slices.Equal(got, want) {
		ps = append(ps, fmt.Sprintf("trusts %v, want %v", got, want))
	}
	// Managed policies: compared by name, since the template joins their ARNs with the partition.
	var wantManaged []string
	for _, m := range listProp(p, "ManagedPolicyArns") {
		b, _ := json.Marshal(m)
		s := string(b)
		wantManaged = append(wantManaged, strings.Trim(s[strings.LastIndex(s, "policy/")+len("policy/"):], `"]}`))
	}
	if len(wantManaged) > 0 {
		att, err := c.aws.IAM.ListAttachedRolePolicies(ctx, &iam.ListAttachedRolePoliciesInput{RoleName: aws.String(phys)})
		if err != nil {
			return append(ps, "managed policies: "+err.Error())
		}
		var got []string
		for _, a := range att.AttachedPolicies {
			arn := aws.ToString(a.PolicyArn)
			got = append(got, arn[strings.LastIndex(arn, "policy/")+len("policy/"):])
		}
		if !sameSet(got, wantManaged) {
			ps = append(ps, fmt.Sprintf("managed policies %v, want %v", got, wantManaged))
		}
	}
	return ps
}

// checkPolicy: each role the template attaches the policy to has it, with the same actions.
func checkPolicy(ctx context.Context, c *checker, _ string, r TemplateResource, _ string) []string {
	var ps []string
	p := r.Properties
	name, _ := strProp(p, "PolicyName")
	want, _ := p["PolicyDocument"].(map[string]any)
	for _, role := range listProp(p, "Roles") {
		roleName, ok := c.resolve(role)
		if !ok || roleName == "" {
			ps = append(ps, fmt.Sprintf("role %v is not in the stack", role))
			continue
		}
		out, err := c.aws.IAM.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(roleName), PolicyName: aws.String(name)})
		if err != nil {
			ps = append(ps, fmt.Sprintf("role %s: %v", roleName, err))
			continue
		}
		doc, err := policyDocument(aws.ToString(out.PolicyDocument))
		if err != nil {
			ps = append(ps, fmt.Sprintf("role %s: %v", roleName, err))
			continue
		}
		if got, want := actions(doc), actions(want); !slices.Equal(got, want) {
			ps = append(ps, fmt.Sprintf("role %s: actions %v, want %v", roleName, got, want))
		}
	}
	return ps
}

// ----------------------------------------------------------------------------------------- logs

func checkLogGroup(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	out, err := c.aws.Logs.DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	for _, g := range out.LogGroups {
		if aws.ToString(g.LogGroupName) == phys {
			compareStr(&ps, r.Properties, "LogGroupName", phys)
			compareInt(&ps, r.Properties, "RetentionInDays", int(aws.ToInt32(g.RetentionInDays)))
			return ps
		}
	}
	return []string{"no such log group"}
}

// ------------------------------------------------------------------------------------ parameter

// checkParameter: an SSM parameter (a lambda stack's lambdas, the executors' network) has the
// name, type and value the template gives it.
func checkParameter(ctx context.Context, c *checker, _ string, r TemplateResource, phys string) []string {
	var ps []string
	out, err := c.aws.SSM.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(phys)})
	if err != nil {
		return []string{err.Error()}
	}
	compareStr(&ps, r.Properties, "Name", aws.ToString(out.Parameter.Name))
	compareStr(&ps, r.Properties, "Type", string(out.Parameter.Type))
	compareStr(&ps, r.Properties, "Value", aws.ToString(out.Parameter.Value))
	return ps
}
