package deployed

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// These tests take paths of Check that call no AWS API (clients are nil: a call would panic).

func template(t *testing.T, js string) *Template {
	t.Helper()
	var tpl Template
	if err := json.Unmarshal([]byte(js), &tpl); err != nil {
		t.Fatal(err)
	}
	return &tpl
}

func problemsWith(r *Report, substr string) int {
	n := 0
	for _, p := range r.Problems {
		if strings.Contains(p, substr) {
			n++
		}
	}
	return n
}

func TestUnknownTypeFails(t *testing.T) {
	tpl := template(t, `{"Resources": {"Thing": {"Type": "AWS::Foo::Bar"}}}`)
	r := Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{"Thing": {Type: "AWS::Foo::Bar", PhysicalID: "x"}}})
	if r.OK() || problemsWith(r, "AWS::Foo::Bar (Thing): a resource type the check does not know") != 1 {
		t.Errorf("problems %q, want one naming the unknown type", r.Problems)
	}
}

func TestMissingResourceFails(t *testing.T) {
	tpl := template(t, `{"Resources": {
		"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "atf-dev-echo-high"}},
		"Table": {"Type": "AWS::DynamoDB::Table"}}}`)
	r := Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{
		"Table": {Type: "AWS::SQS::Queue", PhysicalID: "https://sqs/1/t"}, // another type under its id
	}})
	if problemsWith(r, "AWS::SQS::Queue Queue: not in stack s") != 1 || problemsWith(r, "AWS::DynamoDB::Table Table: the stack has it as AWS::SQS::Queue") != 1 || len(r.Problems) != 2 {
		t.Errorf("problems %q", r.Problems)
	}
}

// TestNotApplied: a type moto does not create is counted with its reason, and fails the check
// only if the stack created it after all (the list would be out of date).
func TestNotApplied(t *testing.T) {
	tpl := template(t, `{"Resources": {
		"P1": {"Type": "AWS::SQS::QueuePolicy"}, "P2": {"Type": "AWS::SQS::QueuePolicy"},
		"Meta": {"Type": "AWS::CDK::Metadata"}}}`)
	r := Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{}})
	if !r.OK() || len(r.NotApplied) != 1 || !strings.HasPrefix(r.NotApplied[0], "AWS::SQS::QueuePolicy (2): ") ||
		len(r.NotVerified) != 1 || !strings.HasPrefix(r.NotVerified[0], "AWS::CDK::Metadata (1): ") {
		t.Errorf("report %+v", r)
	}
	r = Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{"P2": {Type: "AWS::SQS::QueuePolicy", PhysicalID: "p"}}})
	if problemsWith(r, "AWS::SQS::QueuePolicy P2 was created") != 1 || len(r.Problems) != 1 {
		t.Errorf("problems %q, want one saying the list is out of date", r.Problems)
	}
}

// TestListedOnly: a dashboard is verified by its presence in the stack alone.
func TestListedOnly(t *testing.T) {
	tpl := template(t, `{"Resources": {"D": {"Type": "AWS::CloudWatch::Dashboard"}}}`)
	if r := Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{"D": {Type: "AWS::CloudWatch::Dashboard", PhysicalID: "atf-dev"}}}); !r.OK() || len(r.Verified) != 1 {
		t.Errorf("report %+v", r)
	}
	if r := Check(context.Background(), nil, tpl, &Stack{Name: "s", Resources: map[string]Resource{}}); problemsWith(r, "not in stack") != 1 {
		t.Errorf("problems %q", r.Problems)
	}
}

// TestOutputs: each output has the value the template gives it, a join of a resource that was
// not created matching anything in its place.
func TestOutputs(t *testing.T) {
	tpl := template(t, `{"Resources": {"Api": {"Type": "AWS::ApiGatewayV2::Api"}},
		"Outputs": {
			"TableName": {"Value": {"Ref": "Table"}},
			"QueuePrefix": {"Value": "atf-dev"},
			"ApiUrl": {"Value": {"Fn::Join": ["", ["https://", {"Ref": "Api"}, ".execute-api.us-east-1.", {"Ref": "AWS::URLSuffix"}, "/"]]}}}}`)
	st := &Stack{Name: "s", Resources: map[string]Resource{"Table": {Type: "AWS::DynamoDB::Table", PhysicalID: "atf-dev"}},
		Outputs: map[string]string{"TableName": "atf-dev", "QueuePrefix": "atf-dev", "ApiUrl": "https://None.execute-api.us-east-1.amazonaws.com/"}}
	if r := Check(context.Background(), nil, tpl, st); !r.OK() {
		t.Errorf("problems %q", r.Problems)
	}
	st.Outputs = map[string]string{"TableName": "other", "ApiUrl": "https://x.execute-api.eu-west-1.amazonaws.com/"}
	r := Check(context.Background(), nil, tpl, st)
	for _, want := range []string{"output TableName is \"other\"", "output QueuePrefix: not in stack", "output ApiUrl is"} {
		if problemsWith(r, want) != 1 {
			t.Errorf("no problem %q in %q", want, r.Problems)
		}
	}
}

// TestLists: a type is on one list at most, and every entry says why.
func TestLists(t *testing.T) {
	seen := map[string]string{}
	for name, list := range map[string]map[string]string{"notApplied": notApplied, "notVerified": notVerified, "listedOnly": listedOnly} {
		for typ, why := range list {
			if other, ok := seen[typ]; ok {
				t.Errorf("%s is in %s and %s", typ, other, name)
			}
			seen[typ] = name
			if _, ok := checks[typ]; ok && name != "listedOnly" {
				t.Errorf("%s is in %s and checked", typ, name)
			}
			if len(why) < 20 {
				t.Errorf("%s in %s: no reason", typ, name)
			}
		}
	}
}

func TestNames(t *testing.T) {
	c := &checker{st: &Stack{Resources: map[string]Resource{
		"Q":  {Type: "AWS::SQS::Queue", PhysicalID: "https://sqs.us-east-1.amazonaws.com/123456789012/atf-dev-echo-high"},
		"Fn": {Type: "AWS::Lambda::Function", PhysicalID: "atf-dev-Worker-ABC"},
	}}}
	getAtt := func(id string) any { return map[string]any{"Fn::GetAtt": []any{id, "Arn"}} }
	for _, tc := range []struct {
		got  string
		want any
		ok   bool
	}{
		{"arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high", getAtt("Q"), true},
		{"arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high-dlq", getAtt("Q"), false},
		{"arn:aws:lambda:us-east-1:123456789012:function:atf-dev-Worker-ABC", map[string]any{"Ref": "Fn"}, true},
		{"atf-dev-Worker-ABC", map[string]any{"Ref": "Fn"}, true},
		{"arn:aws:lambda:us-east-1:123456789012:function:atf-dev-Worker-ABCD", getAtt("Fn"), false},
		{"anything", getAtt("Missing"), false},
	} {
		if got := c.names(tc.got, tc.want); got != tc.ok {
			t.Errorf("names(%q, %v) = %v", tc.got, tc.want, got)
		}
	}
}
