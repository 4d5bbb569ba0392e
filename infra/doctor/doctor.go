package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/openatf/atf/infra/stack"
	"github.com/openatf/atf/shared/registry"
)

const (
	// callTimeout bounds each AWS call, the SDK's retries included.
	callTimeout = 10 * time.Second
	// dockerTimeout bounds `docker info`, which waits for the daemon.
	dockerTimeout = 20 * time.Second
	// defaultQualifier is CDK's bootstrap qualifier unless an app sets another.
	defaultQualifier = "hnb659fds"
	// minBootstrapVersion is the bootstrap version the templates require (CDK's
	// CheckBootstrapVersion rule).
	minBootstrapVersion = 6
	// toolkitStack is the stack `cdk bootstrap` deploys.
	toolkitStack = "CDKToolkit"
)

// doctor checks one environment's account.
type doctor struct {
	name      string
	env       stack.Environment
	reg       *registry.Registry
	cfg       aws.Config
	qualifier string
	docker    []string // the command that answers if Docker runs
}

// level is how a check came out.
type level string

const (
	ok   level = "ok"
	warn level = "warn"
	fail level = "FAIL"
)

// result is one check's outcome: what was found, and for a warning or a failure what to do.
type result struct {
	level level
	check string
	msg   string
}

// account is where the credentials lead.
type account struct {
	id, partition, region string
}

// run runs every check, in the order a deploy needs them.
func (d *doctor) run(ctx context.Context) []result {
	if d.env.Region != "" {
		d.cfg.Region = d.env.Region
	}
	var out []result
	var acct account
	if d.cfg.Region == "" {
		out = append(out, result{fail, "region", fmt.Sprintf("no region: set region in the environments file for %s, or AWS_REGION", d.name)})
	} else {
		var r result
		acct, r = d.credentials(ctx)
		out = append(out, r)
		if r.level == fail {
			out = append(out, result{fail, "account", "not checked (lambda concurrency, cdk bootstrap): it needs working credentials"})
		} else {
			out = append(out, d.concurrency(ctx), d.bootstrap(ctx, acct))
		}
	}
	if r := d.dockerRuns(ctx); r != nil {
		out = append(out, *r)
	}
	if r := d.alarms(acct); r != nil {
		out = append(out, *r)
	}
	return out
}

// report writes the results, and says whether none failed.
func report(w io.Writer, env string, results []result) bool {
	failed := 0
	for _, r := range results {
		fmt.Fprintf(w, "%-4s  %s: %s\n", r.level, r.check, r.msg)
		if r.level == fail {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "doctor: %d of %d checks failed for environment %s: fix them before make deploy\n", failed, len(results), env)
	}
	return failed == 0
}

// credentials finds the caller's account, which must be the environment's if it names one.
func (d *doctor) credentials(ctx context.Context) (account, result) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := sts.NewFromConfig(d.cfg).GetCallerIdentity(c, &sts.GetCallerIdentityInput{})
	if err != nil {
		return account{}, result{fail, "credentials", fmt.Sprintf("no AWS credentials that work (%v): set AWS_PROFILE (after aws sso login), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", err)}
	}
	acct := account{id: aws.ToString(out.Account), partition: "aws", region: d.cfg.Region}
	if parts := strings.Split(aws.ToString(out.Arn), ":"); len(parts) > 1 {
		acct.partition = parts[1]
	}
	if d.env.Account != "" && d.env.Account != acct.id {
		return acct, result{fail, "credentials", fmt.Sprintf("they are of account %s, and environment %s deploys to account %s: use credentials of %s, or change its account", acct.id, d.name, d.env.Account, d.env.Account)}
	}
	return acct, result{ok, "credentials", fmt.Sprintf("account %s in %s, as %s", acct.id, d.cfg.Region, aws.ToString(out.Arn))}
}

// concurrency compares the account's Lambda concurrency with what the environment's stacks
// reserve: AWS refuses a reservation that leaves less unreserved than it keeps
// (stack.MinUnreserved), which fails the deploy. What the other environments of the account
// reserve is already out of what is unreserved; what this one's deployed functions reserve is
// counted back in, since its deploy replaces it.
func (d *doctor) concurrency(ctx context.Context) result {
	const check = "lambda concurrency"
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := lambda.NewFromConfig(d.cfg).GetAccountSettings(c, &lambda.GetAccountSettingsInput{})
	if err != nil || out.AccountLimit == nil {
		return result{fail, check, fmt.Sprintf("cannot read the account's settings (GetAccountSettings): %v", err)}
	}
	limit := int(out.AccountLimit.ConcurrentExecutions)
	unreserved := int(aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions))
	reserved, eventSources := stack.Concurrency(d.env, d.reg)
	if !d.env.ReservedConcurrency {
		if eventSources > limit {
			return result{warn, check, fmt.Sprintf("the environment reserves nothing (reserved_concurrency false), but its worker functions may run %d invocations at once (their event source mappings' MaximumConcurrency), over the account's limit %d: under load they, the status functions and the API throttle one another; ask AWS to raise the limit (Service Quotas: Lambda, Concurrent executions)", eventSources, limit)}
		}
		return result{ok, check, fmt.Sprintf("the environment reserves nothing (reserved_concurrency false); the account's limit is %d, %d unreserved", limit, unreserved)}
	}
	if configured := d.env.AccountLimit(); configured > limit {
		return result{fail, check, fmt.Sprintf("the account's limit is %d, and the environment's account_concurrency says %d: set account_concurrency to %d (make synth checks against it), or ask AWS to raise the limit (Service Quotas: Lambda, Concurrent executions)", limit, configured, limit)}
	}
	held, err := d.reservedNow(ctx)
	if err != nil {
		return result{fail, check, fmt.Sprintf("cannot read what the environment's deployed functions reserve: %v", err)}
	}
	keep := stack.MinUnreserved(limit)
	if free := unreserved + held - keep; reserved > free {
		return result{fail, check, fmt.Sprintf("the environment's functions reserve %d (the consumer and each status function), and the account has %d unreserved of its limit %d (%d of it held by the environment's deployed functions), of which AWS keeps %d: the deploy would fail; set reserved_concurrency false for this environment, or a smaller status_concurrency, or ask AWS to raise the limit (Service Quotas: Lambda, Concurrent executions)",
			reserved, unreserved+held, limit, held, keep)}
	}
	return result{ok, check, fmt.Sprintf("the environment's functions reserve %d; the account's limit is %d, %d unreserved (%d of it held by the environment's deployed functions), AWS keeps %d", reserved, limit, unreserved+held, held, keep)}
}

// reservedNow sums the reserved concurrency of the functions of the environment's stacks as
// deployed; a stack not deployed reserves nothing.
func (d *doctor) reservedNow(ctx context.Context) (int, error) {
	cfn, fns := cloudformation.NewFromConfig(d.cfg), lambda.NewFromConfig(d.cfg)
	names := []string{"atf-" + d.name}
	for _, s := range d.reg.Stacks() {
		names = append(names, stack.StackName(d.name, s))
	}
	held := 0
	for _, name := range names {
		p := cloudformation.NewListStackResourcesPaginator(cfn, &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
		for p.HasMorePages() {
			c, cancel := context.WithTimeout(ctx, callTimeout)
			page, err := p.NextPage(c)
			cancel()
			if stackMissing(err) {
				break
			}
			if err != nil {
				return 0, fmt.Errorf("stack %s: %w", name, err)
			}
			for _, r := range page.StackResourceSummaries {
				if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" || r.PhysicalResourceId == nil {
					continue
				}
				c, cancel := context.WithTimeout(ctx, callTimeout)
				out, err := fns.GetFunctionConcurrency(c, &lambda.GetFunctionConcurrencyInput{FunctionName: r.PhysicalResourceId})
				cancel()
				if err != nil {
					return 0, fmt.Errorf("function %s: %w", aws.ToString(r.PhysicalResourceId), err)
				}
				held += int(aws.ToInt32(out.ReservedConcurrentExecutions))
			}
		}
	}
	return held, nil
}

// stackMissing tells CloudFormation's answer for a stack that does not exist.
func stackMissing(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationError" && strings.Contains(ae.ErrorMessage(), "does not exist")
}

// bootstrap checks that `cdk bootstrap` ran in the account and region, as the CDK CLI reads it:
// the version parameter of the qualifier.
func (d *doctor) bootstrap(ctx context.Context, acct account) result {
	const check = "cdk bootstrap"
	todo := fmt.Sprintf("run `.tools/node_modules/.bin/cdk bootstrap aws://%s/%s` once (make cdk-cli installs the CLI)", acct.id, acct.region)
	param := "/cdk-bootstrap/" + d.qualifier + "/version"
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := ssm.NewFromConfig(d.cfg).GetParameter(c, &ssm.GetParameterInput{Name: aws.String(param)})
	var missing *ssmtypes.ParameterNotFound
	switch {
	case errors.As(err, &missing):
		return d.toolkitWithoutParameter(ctx, param, todo)
	case err != nil:
		return result{fail, check, fmt.Sprintf("cannot read %s: %v", param, err)}
	}
	version, err := strconv.Atoi(aws.ToString(out.Parameter.Value))
	if err != nil || version < minBootstrapVersion {
		return result{fail, check, fmt.Sprintf("%s is %q, older than the version %d the templates need: %s", param, aws.ToString(out.Parameter.Value), minBootstrapVersion, todo)}
	}
	return result{ok, check, fmt.Sprintf("bootstrapped, version %d (%s)", version, param)}
}

// toolkitWithoutParameter tells a bootstrap of another qualifier from none.
func (d *doctor) toolkitWithoutParameter(ctx context.Context, param, todo string) result {
	const check = "cdk bootstrap"
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := cloudformation.NewFromConfig(d.cfg).DescribeStacks(c, &cloudformation.DescribeStacksInput{StackName: aws.String(toolkitStack)})
	switch {
	case stackMissing(err):
		return result{fail, check, "the account is not bootstrapped in this region (no " + param + "): " + todo}
	case err != nil:
		return result{fail, check, fmt.Sprintf("no %s, and cannot read the %s stack: %v", param, toolkitStack, err)}
	}
	return result{fail, check, fmt.Sprintf("the %s stack exists but not %s: it was bootstrapped with another qualifier (pass -qualifier, as cdk.json's @aws-cdk/core:bootstrapQualifier), or %s", toolkitStack, param, todo)}
}

// dockerRuns checks that Docker answers, where the registry has ecs lambdas: their images are
// built at deploy time. Nil if none.
func (d *doctor) dockerRuns(ctx context.Context) *result {
	var ecs []string
	for _, e := range d.reg.Lambdas {
		if e.Kind == registry.KindECS {
			ecs = append(ecs, e.Name)
		}
	}
	if len(ecs) == 0 {
		return nil
	}
	c, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	out, err := exec.CommandContext(c, d.docker[0], d.docker[1:]...).CombinedOutput()
	if err != nil {
		return &result{fail, "docker", fmt.Sprintf("%s does not answer (%v: %s): the images of the ecs lambdas %s are built at deploy time; start Docker, or install it",
			strings.Join(d.docker, " "), err, strings.TrimSpace(string(out)), strings.Join(ecs, ", "))}
	}
	return &result{ok, "docker", fmt.Sprintf("Docker %s answers, for the ecs lambdas %s", strings.TrimSpace(string(out)), strings.Join(ecs, ", "))}
}

// alarms checks that the environment's alarms reach someone. Nil without alarms.
func (d *doctor) alarms(acct account) *result {
	a := d.env.Alarms
	switch {
	case a == nil:
		return nil
	case a.TopicARN != "":
		return &result{ok, "alarms", "they notify " + a.TopicARN}
	case a.Email != "":
		return &result{ok, "alarms", "they email " + a.Email + " (once the address confirms the subscription AWS mails it)"}
	}
	topic := stack.AlarmTopicName(d.name)
	if acct.id != "" && acct.region != "" {
		topic = fmt.Sprintf("arn:%s:sns:%s:%s:%s", acct.partition, acct.region, acct.id, topic)
	}
	return &result{warn, "alarms", "nobody is subscribed to the alarm topic " + topic + ": set alarms.email or alarms.topic_arn in the environments file, or subscribe to the topic (the core stack's output AlarmTopicArn)"}
}
