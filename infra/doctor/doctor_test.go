package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/openatf/atf/infra/stack"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// testDoctor is a doctor of environment name, configured as the repository's dev, with the
// registry js.
func testDoctor(t *testing.T, name, js string) *doctor {
	t.Helper()
	envs, err := stack.LoadEnvironments(filepath.Join("..", "environments.json"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return &doctor{name: name, env: envs["dev"], reg: reg, qualifier: defaultQualifier, docker: []string{"false"}}
}

const (
	functionRegistry = `{"lambdas": [{"name": "a", "priorities": ["normal"], "concurrency": 1}]}`
	ecsRegistry      = `{"lambdas": [{"name": "a"}, {"name": "long", "kind": "ecs"}]}`
)

// find returns the result of check, or fails the test.
func find(t *testing.T, results []result, check string) result {
	t.Helper()
	for _, r := range results {
		if r.check == check {
			return r
		}
	}
	t.Fatalf("no result of %q in %v", check, results)
	return result{}
}

// want fails the test unless r is of level l and says every one of says.
func want(t *testing.T, r result, l level, says ...string) {
	t.Helper()
	if r.level != l {
		t.Errorf("%s: %s %q, want %s", r.check, r.level, r.msg, l)
	}
	for _, s := range says {
		if !strings.Contains(r.msg, s) {
			t.Errorf("%s: %q, want it to say %q", r.check, r.msg, s)
		}
	}
}

// TestDockerChecked: Docker is checked only where the registry has ecs lambdas, and a Docker that
// does not answer fails, naming them.
func TestDockerChecked(t *testing.T) {
	if r := testDoctor(t, "dev", functionRegistry).dockerRuns(t.Context()); r != nil {
		t.Errorf("no ecs lambda, yet Docker was checked: %v", *r)
	}
	d := testDoctor(t, "dev", ecsRegistry)
	want(t, *d.dockerRuns(t.Context()), fail, "the images of the ecs lambdas long are built at deploy time; start Docker")
	d.docker = []string{"echo", "27.3.1"}
	want(t, *d.dockerRuns(t.Context()), ok, "Docker 27.3.1 answers")
}

// TestAlarmsReachSomeone: alarms with neither an email nor a topic warn, naming the topic that
// nobody is subscribed to; an email or a topic is reported.
func TestAlarmsReachSomeone(t *testing.T) {
	d := testDoctor(t, "staging", functionRegistry)
	if r := d.alarms(account{}); r != nil {
		t.Errorf("no alarms, yet %v", *r)
	}
	acct := account{id: "123456789012", partition: "aws", region: "eu-west-1"}
	d.env.Alarms = &stack.Alarms{}
	want(t, *d.alarms(acct), warn, "nobody is subscribed to the alarm topic arn:aws:sns:eu-west-1:123456789012:atf-staging-alarms")
	d.env.Alarms.Email = "ops@example.com"
	want(t, *d.alarms(acct), ok, "ops@example.com")
	d.env.Alarms.Email, d.env.Alarms.TopicARN = "", "arn:aws:sns:eu-west-1:123456789012:ops"
	want(t, *d.alarms(acct), ok, "arn:aws:sns:eu-west-1:123456789012:ops")
}

// TestReport: a failure fails the doctor; a warning does not.
func TestReport(t *testing.T) {
	var b bytes.Buffer
	if !report(&b, "dev", []result{{ok, "a", "fine"}, {warn, "b", "look"}}) {
		t.Errorf("a warning failed the doctor:\n%s", b.String())
	}
	b.Reset()
	if report(&b, "dev", []result{{ok, "a", "fine"}, {fail, "b", "do this"}}) || !strings.Contains(b.String(), "FAIL  b: do this") {
		t.Errorf("a failure did not fail the doctor:\n%s", b.String())
	}
}

// TestNoRegion: without a region nothing of the account is checked, and the doctor says where to
// set one.
func TestNoRegion(t *testing.T) {
	d := testDoctor(t, "dev", functionRegistry)
	d.cfg = aws.Config{}
	d.env.Region = ""
	results := d.run(t.Context())
	want(t, find(t, results, "region"), fail, "set region in the environments file")
	for _, r := range results {
		if r.check == "credentials" {
			t.Errorf("credentials checked without a region: %v", r)
		}
	}
}

// motoDoctor is a doctor of a new environment whose every AWS call goes to moto (the
// emulators' endpoint, which serves STS, Lambda, SSM and CloudFormation), and moto's account.
// Moto does not serve Lambda's GetAccountSettings (it answers 404): a proxy in front of it
// answers that call as AWS documents it, with the account's limit and unreserved concurrency.
func motoDoctor(t *testing.T, js string, limit, unreserved int) (*doctor, string) {
	cfg := awstest.Config(t, "SSM")
	moto := cmp.Or(os.Getenv("AWS_ENDPOINT_URL_SSM"), os.Getenv("AWS_ENDPOINT_URL"))
	target, err := url.Parse(moto)
	if err != nil {
		t.Fatal(err)
	}
	toMoto := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.TrimSuffix(r.URL.Path, "/") == "/2016-08-19/account-settings" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"AccountLimit": {"ConcurrentExecutions": %d, "UnreservedConcurrentExecutions": %d, "CodeSizeUnzipped": 262144000, "CodeSizeZipped": 52428800, "TotalCodeSize": 80530636800}, "AccountUsage": {"FunctionCount": 0, "TotalCodeSize": 0}}`, limit, unreserved)
			return
		}
		toMoto.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.BaseEndpoint = aws.String(srv.URL)
	// A name and qualifier of this test alone: no stack or parameter of it exists before.
	suffix := strings.ReplaceAll(awstest.Name("d"), "-", "")
	d := testDoctor(t, suffix, js)
	d.cfg, d.qualifier = cfg, suffix
	id, err := sts.NewFromConfig(cfg).GetCallerIdentity(t.Context(), &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	return d, aws.ToString(id.Account)
}

// TestDoctorOnMoto runs the checks against moto on a new account (a Lambda concurrency limit of
// 10): credentials, the concurrency, and the CDK bootstrap, missing, too old and in place.
func TestDoctorOnMoto(t *testing.T) {
	d, acct := motoDoctor(t, functionRegistry, 10, 10)
	results := d.run(t.Context())
	want(t, find(t, results, "credentials"), ok, "account "+acct+" in us-east-1")
	want(t, find(t, results, "lambda concurrency"), ok, "the environment reserves nothing (reserved_concurrency false); the account's limit is 10, 10 unreserved")
	want(t, find(t, results, "cdk bootstrap"), fail, "not bootstrapped", "cdk bootstrap aws://"+acct+"/us-east-1")

	ssm := awstest.NewSSM(t)
	param := "/cdk-bootstrap/" + d.qualifier + "/version"
	awstest.PutParameters(t, ssm, param, "5")
	want(t, d.bootstrap(t.Context(), account{id: acct, region: "us-east-1"}), fail, `is "5", older than the version 6`)
	awstest.PutParameters(t, ssm, param, "30")
	results = d.run(t.Context())
	want(t, find(t, results, "cdk bootstrap"), ok, "bootstrapped, version 30")
	if !report(&bytes.Buffer{}, d.name, results) {
		t.Errorf("the doctor failed on a bootstrapped account: %v", results)
	}

	// Reserving on a new account: its limit is not the default, and nothing can be reserved.
	d.env.ReservedConcurrency = true
	want(t, d.concurrency(t.Context()), fail, "the account's limit is 10, and the environment's account_concurrency says 1000: set account_concurrency to 10")
	d.env.AccountConcurrency = 10
	want(t, d.concurrency(t.Context()), fail, "of which AWS keeps 10: the deploy would fail; set reserved_concurrency false")

	d.env.Account = "999999999999"
	results = d.run(t.Context())
	want(t, find(t, results, "credentials"), fail, "they are of account "+acct+", and environment "+d.name+" deploys to account 999999999999")
	want(t, find(t, results, "account"), fail, "not checked")
}

// TestDoctorCountsWhatIsDeployed: what the environment's deployed functions reserve is counted
// back into what is unreserved, since its deploy replaces it; the rest is held to what AWS keeps.
func TestDoctorCountsWhatIsDeployed(t *testing.T) {
	// The account: limit 1000, 107 unreserved, of which the deployed function below holds 7.
	d, _ := motoDoctor(t, functionRegistry, 1000, 107)
	d.env.ReservedConcurrency = true
	deployFunction(t, d, "atf-"+d.name, 7)

	d.env.StatusConcurrency = 13 // 14 with the consumer's: 107 + 7 - 100 is all there is
	want(t, d.concurrency(t.Context()), ok, "the environment's functions reserve 14", "114 unreserved (7 of it held by the environment's deployed functions), AWS keeps 100")
	d.env.StatusConcurrency = 14
	want(t, d.concurrency(t.Context()), fail, "the environment's functions reserve 15 (the consumer and each status function), and the account has 114 unreserved of its limit 1000 (7 of it held")
}

// deployFunction deploys a stack called name into moto with one function that reserves
// reserved, as an environment's stack deployed before, and deletes it when the test ends.
func deployFunction(t *testing.T, d *doctor, name string, reserved int) {
	t.Helper()
	cfn := cloudformation.NewFromConfig(d.cfg)
	template := fmt.Sprintf(`{"Resources": {
		"Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}}},
		"Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": "python3.12", "Handler": "index.handler", "Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Code": {"ZipFile": "def handler(e, c): pass"}, "ReservedConcurrentExecutions": %d}}}}`, reserved)
	if _, err := cfn.CreateStack(t.Context(), &cloudformation.CreateStackInput{StackName: aws.String(name), TemplateBody: aws.String(template)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cfn.DeleteStack(context.Background(), &cloudformation.DeleteStackInput{StackName: aws.String(name)})
	})
	out, err := cfn.ListStackResources(t.Context(), &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	fns := lambda.NewFromConfig(d.cfg)
	for _, r := range out.StackResourceSummaries {
		if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" {
			continue
		}
		got, err := fns.GetFunctionConcurrency(t.Context(), &lambda.GetFunctionConcurrencyInput{FunctionName: r.PhysicalResourceId})
		if err != nil {
			t.Fatal(err)
		}
		if int(aws.ToInt32(got.ReservedConcurrentExecutions)) != reserved {
			t.Fatalf("moto deployed %s reserving %v, want %d", aws.ToString(r.PhysicalResourceId), got.ReservedConcurrentExecutions, reserved)
		}
		return
	}
	t.Fatalf("stack %s has no function: %v", name, out.StackResourceSummaries)
}
