package functions_test

// moto enforces no IAM policy, so a function whose role lacks an action works there and fails
// on AWS. The audit below stands in: each function's AWS calls (and those Lambda's event source
// mappings make with its role) go through a proxy of its own that records the IAM action and
// resource of each, then to moto (or to the Invoke API server), and after the scenarios every
// recorded call is checked against the function's deployed role, read back through the IAM API.
//
// What it evaluates: the Allow statements of the role's inline policies, by action and resource
// (with IAM's * and ? wildcards), and of their conditions the one that keeps a status function to
// its own lambda's items: dynamodb:LeadingKeys under ForAllValues:StringLike or StringEquals
// (every partition key a DynamoDB request reads or writes must match). Other condition keys
// (dynamodb:Attributes, dynamodb:Select) are not evaluated and count as met, so the audit can miss
// a call they deny, never report one that is allowed. A Deny, NotAction, NotResource or managed
// policy fails the audit as not understood.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
)

// apiCall is one IAM action on one resource; for DynamoDB with the partition keys it touches
// (dynamodb:LeadingKeys), sorted and joined by newlines.
type apiCall struct{ action, resource, leadingKeys string }

// auditProxy forwards a function's AWS requests and records the calls they make.
type auditProxy struct {
	srv             *httptest.Server
	region, account string
	partitionKey    string // the table's partition key attribute (pk)
	moto, invoke    *httputil.ReverseProxy
	dynamo          *motoDynamo // every proxy's DynamoDB requests, in DynamoDB's order
	mu              sync.Mutex
	calls           map[apiCall]int
	unknown         []string // requests it could not name an action for
}

func newAuditProxy(t *testing.T, dynamo *motoDynamo, motoURL, invokeURL, region, account, partitionKey string) *auditProxy {
	t.Helper()
	target := func(raw string) *httputil.ReverseProxy {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return httputil.NewSingleHostReverseProxy(u)
	}
	a := &auditProxy{region: region, account: account, partitionKey: partitionKey, moto: target(motoURL), invoke: target(invokeURL), dynamo: dynamo, calls: map[apiCall]int{}}
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *auditProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	service := signingService(r)
	calls, err := a.callsOf(service, r, body)
	a.mu.Lock()
	if err != nil {
		a.unknown = append(a.unknown, err.Error())
	}
	for _, c := range calls {
		a.calls[c]++
	}
	a.mu.Unlock()
	switch service {
	case "lambda":
		a.invoke.ServeHTTP(w, r)
	case "dynamodb":
		a.dynamo.forward(w, r, a.moto)
	default:
		a.moto.ServeHTTP(w, r)
	}
}

// called reports whether the function made a call of action, on any resource.
func (a *auditProxy) called(action string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.calls {
		if c.action == action {
			return true
		}
	}
	return false
}

// signingService is the service of a SigV4-signed request's credential scope
// (Credential=<key>/<date>/<region>/<service>/aws4_request).
func signingService(r *http.Request) string {
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	cred, _, _ = strings.Cut(cred, ",")
	parts := strings.Split(cred, "/")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

// callsOf names the IAM actions and resources of one request of the AWS JSON protocols that
// DynamoDB, SQS, EventBridge and SSM speak, or of Lambda's Invoke.
func (a *auditProxy) callsOf(service string, r *http.Request, body []byte) ([]apiCall, error) {
	arn := func(svc, rest string) string { return "arn:aws:" + svc + ":" + a.region + ":" + a.account + ":" + rest }
	if service == "lambda" {
		name, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
		name, isInvoke := strings.CutSuffix(name, "/invocations")
		if !ok || !isInvoke {
			return nil, fmt.Errorf("lambda %s %s", r.Method, r.URL.Path)
		}
		// A name, or a partial or full ARN; the qualifier, if any, is left out ($LATEST here).
		name, _ = url.PathUnescape(name)
		if i := strings.LastIndex(name, "function:"); i >= 0 {
			name = name[i+len("function:"):]
		}
		name, _, _ = strings.Cut(name, ":")
		return []apiCall{{"lambda:InvokeFunction", arn("lambda", "function:"+name), ""}}, nil
	}
	_, op, ok := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	if !ok {
		return nil, fmt.Errorf("%s %s %s: no X-Amz-Target", service, r.Method, r.URL.Path)
	}
	var in struct {
		TableName, IndexName, QueueUrl, QueueName string
		dynamoItem
		RequestItems  map[string]json.RawMessage
		TransactItems []map[string]struct {
			TableName string
			dynamoItem
		}
		Entries []struct{ EventBusName string }
		Path    string // SSM's GetParametersByPath
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("%s %s: %w", service, op, err)
	}
	switch service {
	case "dynamodb":
		table := func(name string) string { return arn("dynamodb", "table/"+name) }
		switch op {
		case "BatchGetItem", "BatchWriteItem":
			var calls []apiCall
			for name, raw := range in.RequestItems {
				var batch struct {
					Keys []map[string]attributeValue // BatchGetItem's
				}
				var writes []struct{ PutRequest, DeleteRequest *dynamoItem } // BatchWriteItem's
				if op == "BatchGetItem" {
					_ = json.Unmarshal(raw, &batch)
				} else {
					_ = json.Unmarshal(raw, &writes)
				}
				var keys []string
				for _, k := range batch.Keys {
					keys = append(keys, k[a.partitionKey].S)
				}
				for _, w := range writes {
					for _, it := range []*dynamoItem{w.PutRequest, w.DeleteRequest} {
						if it != nil {
							keys = append(keys, it.leadingKey(a.partitionKey))
						}
					}
				}
				calls = append(calls, apiCall{"dynamodb:" + op, table(name), joinKeys(keys)})
			}
			return calls, nil
		case "TransactWriteItems", "TransactGetItems":
			// IAM authorizes each item by the action it stands for.
			actions := map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
			var calls []apiCall
			for _, item := range in.TransactItems {
				for kind, it := range item {
					calls = append(calls, apiCall{"dynamodb:" + actions[kind], table(it.TableName), it.leadingKey(a.partitionKey)})
				}
			}
			return calls, nil
		}
		res := table(in.TableName)
		if in.IndexName != "" {
			// A query of an index: its partition key is another attribute, which LeadingKeys
			// does not name here; the resource alone decides.
			return []apiCall{{"dynamodb:" + op, res + "/index/" + in.IndexName, ""}}, nil
		}
		return []apiCall{{"dynamodb:" + op, res, in.leadingKey(a.partitionKey)}}, nil
	case "sqs":
		queue := in.QueueName
		if in.QueueUrl != "" {
			queue = path.Base(in.QueueUrl)
		}
		return []apiCall{{"sqs:" + strings.TrimSuffix(op, "Batch"), arn("sqs", queue), ""}}, nil
	case "events":
		var calls []apiCall
		for _, e := range in.Entries {
			calls = append(calls, apiCall{"events:" + op, arn("events", "event-bus/"+busName(e.EventBusName)), ""})
		}
		return calls, nil
	}
	if service == "ssm" && op == "GetParametersByPath" {
		// IAM names a path as a parameter: arn:...:parameter/atf/dev/lambdas.
		return []apiCall{{"ssm:" + op, arn("ssm", "parameter"+in.Path), ""}}, nil
	}
	return nil, fmt.Errorf("%s %s: a service the audit does not know", service, op)
}

// dynamoItem is what names the item of a DynamoDB request: a Key (GetItem, UpdateItem,
// DeleteItem), an Item (PutItem), or a key condition (Query).
type dynamoItem struct {
	Key, Item                 map[string]attributeValue
	KeyConditionExpression    string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]attributeValue
}

type attributeValue struct{ S string }

// keyEquals finds "name = :value" in a key condition.
var keyEquals = regexp.MustCompile(`([#\w]+)\s*=\s*(:\w+)`)

// leadingKey is the partition key value the request names, or "" if it names none.
func (it dynamoItem) leadingKey(partitionKey string) string {
	if v, ok := it.Key[partitionKey]; ok {
		return v.S
	}
	if v, ok := it.Item[partitionKey]; ok {
		return v.S
	}
	for _, m := range keyEquals.FindAllStringSubmatch(it.KeyConditionExpression, -1) {
		if name := cmp.Or(it.ExpressionAttributeNames[m[1]], m[1]); name == partitionKey {
			return it.ExpressionAttributeValues[m[2]].S
		}
	}
	return ""
}

func joinKeys(keys []string) string {
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), "\n")
}

// busName is the name of an event bus given by name or ARN, or the default bus.
func busName(bus string) string {
	if bus == "" {
		return "default"
	}
	return path.Base(bus) // a bus given by its ARN
}

// policyStatement is one statement of a role's policy.
type policyStatement struct {
	Effect      string
	Action      stringList
	Resource    stringList
	NotAction   stringList
	NotResource stringList
	Condition   json.RawMessage
}

// stringList is a policy element that is a string or a list of strings.
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stringList{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(s))
}

// roleStatements reads the statements of the inline policies of the function's role.
func roleStatements(ctx context.Context, t *testing.T, d *deployment, function string) []policyStatement {
	t.Helper()
	iamc := d.clients.IAM
	fn, err := d.clients.Lambda.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(function)})
	if err != nil {
		t.Fatalf("function %s: %v", function, err)
	}
	role := path.Base(aws.ToString(fn.Configuration.Role))
	attached, err := iamc.ListAttachedRolePolicies(ctx, &iam.ListAttachedRolePoliciesInput{RoleName: aws.String(role)})
	if err != nil {
		t.Fatalf("role %s: %v", role, err)
	}
	if len(attached.AttachedPolicies) > 0 {
		t.Errorf("role %s of %s has managed policies, which the audit does not read", role, function)
	}
	names, err := iamc.ListRolePolicies(ctx, &iam.ListRolePoliciesInput{RoleName: aws.String(role)})
	if err != nil {
		t.Fatalf("role %s: %v", role, err)
	}
	var stmts []policyStatement
	for _, name := range names.PolicyNames {
		p, err := iamc.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(role), PolicyName: aws.String(name)})
		if err != nil {
			t.Fatalf("policy %s of role %s: %v", name, role, err)
		}
		doc := aws.ToString(p.PolicyDocument)
		if un, err := url.QueryUnescape(doc); err == nil && strings.HasPrefix(un, "{") {
			doc = un // IAM returns the document URL-encoded
		}
		var pd struct{ Statement []policyStatement }
		if err := json.Unmarshal([]byte(doc), &pd); err != nil {
			t.Fatalf("policy %s of role %s: %v", name, role, err)
		}
		stmts = append(stmts, pd.Statement...)
	}
	return stmts
}

// allows reports whether a statement of stmts allows c.
func allows(stmts []policyStatement, c apiCall) bool {
	return slices.ContainsFunc(stmts, func(s policyStatement) bool {
		return s.Effect == "Allow" &&
			slices.ContainsFunc(s.Action, func(p string) bool { return iamMatch(strings.ToLower(p), strings.ToLower(c.action)) }) &&
			slices.ContainsFunc(s.Resource, func(p string) bool { return iamMatch(p, c.resource) }) &&
			leadingKeysMet(s.Condition, c)
	})
}

// leadingKeysMet evaluates a statement's dynamodb:LeadingKeys conditions on c; other condition
// keys count as met. A call without a partition key (one the audit could not read) meets none.
func leadingKeysMet(condition json.RawMessage, c apiCall) bool {
	var conds map[string]map[string]stringList
	if len(condition) == 0 || json.Unmarshal(condition, &conds) != nil {
		return true
	}
	for op, keys := range conds {
		patterns, ok := keys["dynamodb:LeadingKeys"]
		if !ok {
			continue
		}
		like := strings.HasSuffix(op, "StringLike")
		if !like && !strings.HasSuffix(op, "StringEquals") {
			return false // an operator the audit does not evaluate: not met
		}
		if c.leadingKeys == "" {
			return false
		}
		for _, key := range strings.Split(c.leadingKeys, "\n") {
			if !slices.ContainsFunc(patterns, func(p string) bool { return like && iamMatch(p, key) || !like && p == key }) {
				return false
			}
		}
	}
	return true
}

// iamMatch matches s against an IAM pattern: * is any run of characters, ? any one.
func iamMatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if iamMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && iamMatch(pattern[1:], s[1:])
	}
	return s != "" && s[0] == pattern[0] && iamMatch(pattern[1:], s[1:])
}

// auditIAM checks every call each function made (and its event source mappings made with its
// role) against its role, and fails the test on a call the role does not allow.
func auditIAM(t *testing.T, d *deployment, proxies map[string]*auditProxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checked := 0
	for _, name := range slices.Sorted(maps.Keys(proxies)) {
		a := proxies[name]
		stmts := roleStatements(ctx, t, d, name)
		for _, s := range stmts {
			if s.Effect != "Allow" || len(s.NotAction) > 0 || len(s.NotResource) > 0 {
				t.Errorf("role of %s: a statement the audit does not evaluate: %+v", name, s)
			}
		}
		a.mu.Lock()
		for _, u := range a.unknown {
			t.Errorf("%s (%s) made a request the audit cannot name: %s", name, d.functions[name].asset, u)
		}
		for _, c := range slices.SortedFunc(maps.Keys(a.calls), func(x, y apiCall) int { return strings.Compare(x.action+x.resource, y.action+y.resource) }) {
			checked++
			if !allows(stmts, c) {
				t.Errorf("%s (%s) called %s on %s (partition keys %q) %d times; its deployed role does not allow it: AWS would deny it",
					name, d.functions[name].asset, c.action, c.resource, c.leadingKeys, a.calls[c])
			}
		}
		a.mu.Unlock()
	}
	t.Logf("IAM: %d distinct calls of %d functions checked against their deployed roles", checked, len(proxies))
}

// TestIAMAudit: the audit names the actions and resources of the requests the functions make,
// and tells a call its role allows from one it does not.
func TestIAMAudit(t *testing.T) {
	t.Parallel()
	a := &auditProxy{region: "us-east-1", account: "123456789012", partitionKey: "pk"}
	req := func(service, target, path, body string) []apiCall {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "http://x"+path, strings.NewReader(body))
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/"+service+"/aws4_request, SignedHeaders=host, Signature=x")
		if target != "" {
			r.Header.Set("X-Amz-Target", target)
		}
		calls, err := a.callsOf(signingService(r), r, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return calls
	}
	for _, c := range []struct {
		got  []apiCall
		want apiCall
	}{
		{req("dynamodb", "DynamoDB_20120810.Query", "/", `{"TableName":"atf-dev","IndexName":"due"}`), apiCall{"dynamodb:Query", "arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev/index/due", ""}},
		{req("dynamodb", "DynamoDB_20120810.Query", "/", `{"TableName":"atf-dev","KeyConditionExpression":"#pk = :pk AND #sk > :s","ExpressionAttributeNames":{"#pk":"pk","#sk":"sk"},"ExpressionAttributeValues":{":pk":{"S":"task#echo#3"},":s":{"S":"x"}}}`),
			apiCall{"dynamodb:Query", "arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev", "task#echo#3"}},
		{req("dynamodb", "DynamoDB_20120810.BatchGetItem", "/", `{"RequestItems":{"atf-dev":{"Keys":[{"pk":{"S":"task#b"},"sk":{"S":"1"}},{"pk":{"S":"task#a"},"sk":{"S":"1"}}]}}}`),
			apiCall{"dynamodb:BatchGetItem", "arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev", "task#a\ntask#b"}},
		{req("dynamodb", "DynamoDB_20120810.TransactWriteItems", "/", `{"TransactItems":[{"ConditionCheck":{"TableName":"atf-dev","Key":{"pk":{"S":"gate"}}}}]}`), apiCall{"dynamodb:ConditionCheckItem", "arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev", "gate"}},
		{req("sqs", "AmazonSQS.DeleteMessageBatch", "/", `{"QueueUrl":"http://sqs.us-east-1.amazonaws.com/123456789012/atf-dev-echo-high"}`), apiCall{"sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high", ""}},
		{req("lambda", "", "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A123456789012%3Afunction%3Ast%3A%24LATEST/invocations", `{}`), apiCall{"lambda:InvokeFunction", "arn:aws:lambda:us-east-1:123456789012:function:st", ""}},
	} {
		if len(c.got) != 1 || c.got[0] != c.want {
			t.Errorf("calls %v, want %v", c.got, c.want)
		}
	}
	role := []policyStatement{{Effect: "Allow", Action: stringList{"sqs:ReceiveMessage", "sqs:DeleteMessage"}, Resource: stringList{"arn:aws:sqs:*:123456789012:atf-dev-echo-?igh"}}}
	if !allows(role, apiCall{"sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high", ""}) {
		t.Error("an action and resource the role names are denied")
	}
	for _, c := range []apiCall{
		{"sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high", ""},
		{"sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:atf-dev-echo-high-dlq", ""},
		{"sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:atf-dev-flaky-high", ""},
	} {
		if allows(role, c) {
			t.Errorf("%v is allowed; the role does not name it", c)
		}
	}
	// A status function's role: its own lambda's items only.
	status := []policyStatement{{Effect: "Allow", Action: stringList{"dynamodb:GetItem"}, Resource: stringList{"arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev"},
		Condition: json.RawMessage(`{"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["task#echo#*", "count#echo#*"]}}`)}}
	table := "arn:aws:dynamodb:us-east-1:123456789012:table/atf-dev"
	for keys, want := range map[string]bool{"task#echo#1": true, "count#echo#1\ntask#echo#2": true, "task#flaky#1": false, "task#echo#1\ntask#flaky#1": false, "": false} {
		if got := allows(status, apiCall{"dynamodb:GetItem", table, keys}); got != want {
			t.Errorf("GetItem of %q: allowed %v, want %v", keys, got, want)
		}
	}
}
