package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/registry"
)

// The tests of what a new account needs: environments that reserve no concurrency, environments
// sharing an account, and alarms that reach someone.

// TestFreshAccount: with a new account's limit of 10, dev (reserved_concurrency false)
// synthesizes every stack of the registry, and no function of any of them reserves concurrency;
// an environment that reserves is refused there, saying to turn reservations off.
func TestFreshAccount(t *testing.T) {
	e := mustEnvs(t)["dev"]
	if e.ReservedConcurrency {
		t.Fatal("dev reserves concurrency: reserved_concurrency must be false in dev")
	}
	e.AccountConcurrency = MinAccountConcurrency
	if err := e.Validate("dev"); err != nil {
		t.Fatal(err)
	}
	s := synth(t, map[string]Environment{"dev": e}, mustLoadRegistry(t))["dev"]
	fns := s.resources("AWS::Lambda::Function")
	if len(fns) == 0 {
		t.Fatal("dev has no function")
	}
	for _, fn := range fns {
		if r, ok := props(fn)["ReservedConcurrentExecutions"]; ok {
			t.Errorf("dev on a new account: %s reserves %v", path(fn), r)
		}
	}

	e.ReservedConcurrency = true
	defer func() {
		want := "environment dev: the functions reserve a concurrency of"
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) || !strings.Contains(fmt.Sprint(r), "set reserved_concurrency false") {
			t.Errorf("New panicked with %v, want %q and the way out", r, want)
		}
	}()
	root := standIn(t)
	New(newApp(t.TempDir()), Props{Name: "dev", Env: e, Registry: mustLoadRegistry(t), Assets: filepath.Join(root, "bin", "lambda"), Root: root})
}

// TestSharedAccounts: environments placed in one account and region add up their
// reservations, which must fit the account's limit together though each fits alone; an
// environment that reserves nothing, or one placed elsewhere, adds nothing; and environments of one
// account must agree on its limit.
func TestSharedAccounts(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "a", "handler": "echo", "priorities": ["normal"], "concurrency": 1, "function": {"max_concurrency": {"normal": 300}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	placed := func(name, account, region string, reserves bool) Environment {
		e := mustEnvs(t)[name]
		e.Account, e.Region, e.ReservedConcurrency = account, region, reserves
		return e
	}
	const account, other = "111111111111", "222222222222"
	if err := checkConcurrency(placed("staging", account, "us-east-1", true), reg); err != nil {
		t.Fatalf("one environment alone: %v", err)
	}
	for name, tc := range map[string]struct {
		envs map[string]Environment
		want string // "" for none
	}{
		"sharing": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", account, "us-east-1", true), "dev": placed("dev", account, "us-east-1", false),
		}, "environments prod, staging share account 111111111111 in us-east-1: their functions' reserved concurrency 602 plus the event source mappings' MaximumConcurrency 600 is 1202, over the account's concurrency limit 1000"},
		"other regions": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", account, "eu-west-1", true),
		}, ""},
		"other accounts": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", other, "us-east-1", true),
		}, ""},
		"unplaced": {map[string]Environment{
			"staging": placed("staging", "", "", true), "prod": placed("prod", "", "", true),
		}, ""},
		"one reserving": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", false), "prod": placed("prod", account, "us-east-1", true),
		}, ""},
		"limits differ": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", false), "prod": func() Environment {
				e := placed("prod", account, "us-east-1", true)
				e.AccountConcurrency = 2000
				return e
			}(),
		}, "environments prod, staging share account 111111111111 in us-east-1 but not its concurrency limit: account_concurrency 2000 (prod) and 1000 (staging)"},
	} {
		err := CheckSharedAccounts(tc.envs, reg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// smallRegistry is one function lambda of one priority.
const smallRegistry = `{"lambdas": [{"name": "a", "handler": "echo", "priorities": ["normal"], "concurrency": 1}]}`

// synthSmall synthesizes environment name as e, with smallRegistry.
func synthSmall(t *testing.T, name string, e Environment) Stacks {
	t.Helper()
	reg, err := registry.Parse([]byte(smallRegistry))
	if err != nil {
		t.Fatal(err)
	}
	root := standIn(t)
	return New(newApp(t.TempDir()), Props{Name: name, Env: e, Registry: reg, Assets: filepath.Join(root, "bin", "lambda"), Root: root})
}

// TestAlarmsToAnExistingTopic: an environment that names a topic (alarms.topic_arn) has every
// alarm of every stack notify that topic, makes none of its own, and outputs it.
func TestAlarmsToAnExistingTopic(t *testing.T) {
	const arn = "arn:aws:sns:us-east-1:123456789012:ops-alarms"
	e := mustEnvs(t)["prod"]
	a := *e.Alarms
	a.Email, a.TopicARN = "", arn
	e.Alarms = &a
	st := synthSmall(t, "prod", e)
	alarms := 0
	for _, s := range st.All() {
		tpl := assertions.Template_FromStack(s, nil)
		tpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(0))
		tpl.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(0))
		for _, r := range *tpl.FindResources(jsii.String("AWS::CloudWatch::Alarm"), nil) {
			r := *r
			if strings.Contains(path(r), "/Executor/Scaling/") {
				continue
			}
			alarms++
			if to := list(props(r)["AlarmActions"]); len(to) != 1 || to[0] != arn {
				t.Errorf("%s: alarm %s notifies %v, want %s", *s.StackName(), path(r), props(r)["AlarmActions"], arn)
			}
		}
	}
	if alarms == 0 {
		t.Fatal("no alarm")
	}
	assertions.Template_FromStack(st.Core, nil).HasOutput(jsii.String("AlarmTopicArn"), map[string]any{"Value": arn})
}

// TestAlarmsUnsubscribed: alarms with neither email nor topic_arn notify the core's topic, which
// the core outputs, with a warning that nobody is subscribed; an email subscribes to it.
func TestAlarmsUnsubscribed(t *testing.T) {
	e := mustEnvs(t)["prod"]
	a := *e.Alarms
	a.Email, a.TopicARN = "", ""
	e.Alarms = &a
	core := synthSmall(t, "prod", e).Core
	tpl := assertions.Template_FromStack(core, nil)
	tpl.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(0))
	topics := *tpl.FindResources(jsii.String("AWS::SNS::Topic"), nil)
	if len(topics) != 1 {
		t.Fatalf("%d topics, want 1", len(topics))
	}
	for id := range topics {
		tpl.HasOutput(jsii.String("AlarmTopicArn"), map[string]any{"Value": map[string]any{"Ref": id}})
	}
	assertions.Annotations_FromStack(core).HasWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("nobody is subscribed to the alarm topic atf-prod-alarms")))

	a.Email = "ops@example.com"
	core = synthSmall(t, "prod", e).Core
	assertions.Template_FromStack(core, nil).HasResourceProperties(jsii.String("AWS::SNS::Subscription"), map[string]any{"Protocol": "email", "Endpoint": "ops@example.com"})
	assertions.Annotations_FromStack(core).HasNoWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("nobody is subscribed")))
}

// TestAlarmTopicChecked: an environment's alarm topic is a standard SNS topic's ARN, in its
// region, and not set beside an email.
func TestAlarmTopicChecked(t *testing.T) {
	alarms := `"dlq_messages": 1, "dead_tasks": 1, "delivery_p95_ms": 1, "consumer_errors": 1`
	for name, tc := range map[string]struct {
		region, alarms, want string
	}{
		"not an ARN":   {"", `"topic_arn": "ops"`, `alarms.topic_arn "ops" is not an SNS topic's ARN`},
		"FIFO":         {"", `"topic_arn": "arn:aws:sns:us-east-1:123456789012:ops.fifo"`, "is not an SNS topic's ARN (a standard topic"},
		"and an email": {"", `"email": "ops@example.com", "topic_arn": "arn:aws:sns:us-east-1:123456789012:ops"`, "set email or topic_arn, not both"},
		"elsewhere":    {"eu-west-1", `"topic_arn": "arn:aws:sns:us-east-1:123456789012:ops"`, "must be in the environment's region eu-west-1"},
		"good":         {"us-east-1", `"topic_arn": "arn:aws:sns:us-east-1:123456789012:ops"`, ""},
		"unplaced":     {"", `"topic_arn": "arn:aws:sns:us-east-1:123456789012:ops"`, ""},
	} {
		js := `{"dev": {"region": "` + tc.region + `", "shards": 4, "log_retention_days": 7, "api": {"rate_limit": 1, "burst_limit": 1}, "nat_gateways": 1, "reserved_concurrency": false, "alarms": {` + tc.alarms + `, ` + alarms + `}}}`
		p := filepath.Join(t.TempDir(), "envs.json")
		must(os.WriteFile(p, []byte(js), 0o644))
		_, err := LoadEnvironments(p)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestReservedConcurrencyRequired: an environments file must say whether each environment
// reserves concurrency: one written before the setting existed would otherwise lose the
// reservations of its staging and prod without a word.
func TestReservedConcurrencyRequired(t *testing.T) {
	p := filepath.Join(t.TempDir(), "envs.json")
	must(os.WriteFile(p, []byte(`{"prod": {"shards": 4, "log_retention_days": 7, "api": {"rate_limit": 1, "burst_limit": 1}, "nat_gateways": 1}}`), 0o644))
	if _, err := LoadEnvironments(p); err == nil || !strings.Contains(err.Error(), "environment prod: reserved_concurrency is missing: true reserves concurrency") {
		t.Errorf("an environment without reserved_concurrency: %v", err)
	}
}
