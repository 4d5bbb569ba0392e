package deployed

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/testkit/awstest"
)

// motoClients returns clients of every service at the moto of the emulators (the SQS endpoint),
// DynamoDB included: the stack's table is created by moto's CloudFormation, in moto.
func motoClients(t *testing.T) *Clients {
	t.Helper()
	cfg := awstest.Config(t, "SQS")
	endpoint := os.Getenv("AWS_ENDPOINT_URL_SQS")
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/moto-api/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		msg := "the SQS endpoint " + endpoint + " is not moto: this test needs moto's CloudFormation (localstack/emulators start)"
		if os.Getenv("ATF_AWS_TESTS") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	at := aws.String(endpoint)
	return &Clients{
		CloudFormation: cloudformation.NewFromConfig(cfg, func(o *cloudformation.Options) { o.BaseEndpoint = at }),
		DynamoDB:       dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = at }),
		SQS:            sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = at }),
		Lambda:         lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.BaseEndpoint = at }),
		EventBridge:    eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) { o.BaseEndpoint = at }),
		IAM:            iam.NewFromConfig(cfg, func(o *iam.Options) { o.BaseEndpoint = at }),
		Logs:           cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.BaseEndpoint = at }),
	}
}

// TestCheckOnMoto: a small stack of the shapes atf's has (a queue redriving to its DLQ, a table
// with a GSI, a role, a log group, a queue policy moto does not create) created by moto's
// CloudFormation passes the check, and the same stack fails it against a template that differs.
func TestCheckOnMoto(t *testing.T) {
	c := motoClients(t)
	name := awstest.Name("atft-deployed")
	tplJSON := `{"Resources": {
		"Dlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "` + name + `-q-dlq", "MessageRetentionPeriod": 1209600}},
		"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "` + name + `-q", "VisibilityTimeout": 270,
			"RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["Dlq", "Arn"]}, "maxReceiveCount": 10}}},
		"Policy": {"Type": "AWS::SQS::QueuePolicy", "Properties": {"Queues": [{"Ref": "Queue"}], "PolicyDocument": {"Version": "2012-10-17",
			"Statement": [{"Effect": "Deny", "Action": "sqs:*", "Principal": {"AWS": "*"}, "Resource": {"Fn::GetAtt": ["Queue", "Arn"]},
			"Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}}},
		"Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": "` + name + `", "BillingMode": "PAY_PER_REQUEST",
			"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
			"AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"},
				{"AttributeName": "due_pk", "AttributeType": "S"}],
			"GlobalSecondaryIndexes": [{"IndexName": "due", "KeySchema": [{"AttributeName": "due_pk", "KeyType": "HASH"}],
				"Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["id", "status"]}}]}},
		"Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Version": "2012-10-17",
			"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": "lambda.amazonaws.com"}}]}}},
		"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 7}}
	},
	"Outputs": {"TableName": {"Value": {"Ref": "Table"}}, "QueuePrefix": {"Value": "` + name + `"}}}`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CloudFormation.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(name), TemplateBody: aws.String(tplJSON)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.CloudFormation.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: aws.String(name)}); err != nil {
			t.Errorf("delete stack %s: %v", name, err)
		}
	})
	st, err := Read(ctx, c.CloudFormation, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Table() != name || st.QueuePrefix() != name || !strings.HasSuffix(st.QueueURLs()[name+"-q"], "/"+name+"-q") {
		t.Errorf("read table %q, queue prefix %q, queues %v", st.Table(), st.QueuePrefix(), st.QueueURLs())
	}
	tpl := template(t, tplJSON)
	r := Check(ctx, c, tpl, st)
	if !r.OK() || len(r.Verified) != 5 || len(r.NotApplied) != 1 {
		t.Fatalf("report %+v", r)
	}

	// The same stack against a template that says otherwise.
	var raw map[string]any
	must(t, json.Unmarshal([]byte(tplJSON), &raw))
	res := raw["Resources"].(map[string]any)
	props := func(id string) map[string]any { return res[id].(map[string]any)["Properties"].(map[string]any) }
	props("Queue")["VisibilityTimeout"] = 30
	props("Queue")["RedrivePolicy"].(map[string]any)["maxReceiveCount"] = 3
	props("Table")["GlobalSecondaryIndexes"].([]any)[0].(map[string]any)["Projection"].(map[string]any)["NonKeyAttributes"] = []any{"id"}
	props("Logs")["RetentionInDays"] = 30
	props("Role")["AssumeRolePolicyDocument"].(map[string]any)["Statement"].([]any)[0].(map[string]any)["Principal"] = map[string]any{"Service": "ecs-tasks.amazonaws.com"}
	b, _ := json.Marshal(raw)
	r = Check(ctx, c, template(t, string(b)), st)
	for _, want := range []string{"VisibilityTimeout is 270, want 30", "maxReceiveCount 10, want 3", "global secondary indexes", "RetentionInDays is 7, want 30", "trusts [lambda.amazonaws.com], want [ecs-tasks.amazonaws.com]"} {
		if problemsWith(r, want) != 1 {
			t.Errorf("no problem %q in %q", want, r.Problems)
		}
	}
	if len(r.Problems) != 5 {
		t.Errorf("%d problems, want 5: %q", len(r.Problems), r.Problems)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
