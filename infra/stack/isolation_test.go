package stack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
)

// grant is one Allow statement of an IAM policy, with the construct paths of the roles the
// policy is attached to.
type grant struct {
	roles     []string
	statement map[string]any
}

func (g grant) actions() []string {
	var out []string
	for _, a := range list(g.statement["Action"]) {
		out = append(out, a.(string))
	}
	return out
}

// grants returns every Allow statement of the stack's role policies.
func grants(s *synthesized) []grant {
	all := s.json["Resources"].(map[string]any)
	var out []grant
	for _, p := range s.resources("AWS::IAM::Policy") {
		var roles []string
		for _, r := range refs(props(p)["Roles"]) {
			roles = append(roles, pathOf(all, r))
		}
		for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
			if st := st.(map[string]any); st["Effect"] == "Allow" {
				out = append(out, grant{roles: roles, statement: st})
			}
		}
	}
	return out
}

// pathOf returns the construct path of the resource with logical id id, or "" (a pseudo
// parameter such as AWS::Partition). An ARN that a lambda stack builds from a core resource's
// known name (refs) resolves to that resource's path, found by its name; any other ARN (a
// pattern) is returned as it is.
func pathOf(all map[string]any, id string) string {
	if strings.HasPrefix(id, "arn:") {
		for _, known := range []struct{ typ, nameProp, arnPart string }{
			{"AWS::DynamoDB::Table", "TableName", ":table/"},
			{"AWS::Events::EventBus", "Name", ":event-bus/"},
			{"AWS::SNS::Topic", "TopicName", ":"},
		} {
			for _, r := range all {
				r := r.(map[string]any)
				if name, ok := props(r)[known.nameProp].(string); ok && r["Type"] == known.typ && strings.HasSuffix(id, known.arnPart+name) {
					return path(r)
				}
			}
		}
		return id
	}
	r, _ := all[id].(map[string]any)
	return path(r)
}

// lambdaOf returns the lambda a construct path belongs to (Lambda-<name>/...), or "".
func lambdaOf(path string) string {
	first, _, _ := strings.Cut(path, "/")
	name, ok := strings.CutPrefix(first, "Lambda-")
	if !ok {
		return ""
	}
	return name
}

// TestWorkerInvokesOnlyItsOwnStatusFunction: each function lambda has a status function of its
// own, configured for it (ATF_LAMBDA), which only that lambda's worker may invoke; no worker may
// invoke another lambda's, and no resource policy opens one to anyone else. So one lambda's
// worker has no path to claim, report or release another lambda's tasks.
func TestWorkerInvokesOnlyItsOwnStatusFunction(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		all := s.json["Resources"].(map[string]any)
		invokes := map[string][]string{} // role -> functions it may invoke
		for _, g := range grants(s) {
			if !slices.Contains(g.actions(), "lambda:InvokeFunction") {
				continue
			}
			for _, role := range g.roles {
				for _, r := range refs(g.statement["Resource"]) {
					invokes[role] = append(invokes[role], pathOf(all, r))
				}
			}
		}
		statusFunctions := map[string]string{} // path -> its ATF_LAMBDA
		for _, fn := range s.resources("AWS::Lambda::Function") {
			if p := path(fn); strings.HasSuffix(p, "/Status/Function/Resource") || strings.HasPrefix(p, "Status/") {
				env := props(fn)["Environment"].(map[string]any)["Variables"].(map[string]any)
				statusFunctions[p], _ = env["ATF_LAMBDA"].(string)
			}
		}
		var want int
		for _, e := range reg.Lambdas {
			if e.Kind != registry.KindFunction {
				continue
			}
			want++
			own := "Lambda-" + e.Name + "/Status/Function/Resource"
			if got := statusFunctions[own]; got != e.Name {
				t.Errorf("%s: lambda %s's status function %s serves ATF_LAMBDA %q, want %q", name, e.Name, own, got, e.Name)
			}
			worker := "Lambda-" + e.Name + "/Worker/Role/Resource"
			fns := slices.Compact(slices.Sorted(slices.Values(invokes[worker])))
			if !slices.Equal(fns, []string{own}) {
				t.Errorf("%s: lambda %s's worker may invoke %v, want its own status function %s only", name, e.Name, fns, own)
			}
		}
		if len(statusFunctions) != want {
			t.Errorf("%s: status functions %v, want one per function lambda (%d)", name, statusFunctions, want)
		}
		for role, fns := range invokes {
			for _, fn := range fns {
				if _, ok := statusFunctions[fn]; ok && lambdaOf(fn) != lambdaOf(role) {
					t.Errorf("%s: %s may invoke %s, another lambda's status function", name, role, fn)
				}
			}
		}
		for _, perm := range s.resources("AWS::Lambda::Permission") {
			for _, r := range refs(props(perm)["FunctionName"]) {
				if _, ok := statusFunctions[pathOf(all, r)]; ok {
					t.Errorf("%s: permission %s lets %v invoke a status function", name, path(perm), props(perm)["Principal"])
				}
			}
		}
	}
}

// tableWideRoles are the roles that serve every lambda, so no key condition applies to their
// table grants: the API function (IAM scopes its callers per lambda by API path) and the
// consumer.
var tableWideRoles = []string{"ApiFunction/Role/Resource", "Consumer/Role/Resource"}

// TestTableGrantsCarryKeyConditions: every grant on the table to a role of one lambda (its status
// function, its executors' task role) carries a dynamodb:LeadingKeys condition that allows that
// lambda's keys only, is on the table alone (no index), and allows no more than a status
// controller calls. Only the roles serving every lambda have grants without a condition.
func TestTableGrantsCarryKeyConditions(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		all := s.json["Resources"].(map[string]any)
		conditioned := map[string]bool{}
		for _, g := range grants(s) {
			onTable := false
			for _, r := range refs(g.statement["Resource"]) {
				onTable = onTable || pathOf(all, r) == "Store/Table/Resource"
			}
			if !onTable {
				continue
			}
			for _, role := range g.roles {
				if slices.Contains(tableWideRoles, role) {
					continue
				}
				lambda := lambdaOf(role)
				cond, _ := g.statement["Condition"].(map[string]any)
				like, _ := cond["ForAllValues:StringLike"].(map[string]any)
				if fmt.Sprint(like["dynamodb:LeadingKeys"]) == fmt.Sprint(upstreamKeys) {
					checkUpstreamReads(t, name, role, g.actions(), cond)
					continue
				}
				if equals, _ := cond["ForAllValues:StringEquals"].(map[string]any); len(cond) == 1 && fmt.Sprint(equals["dynamodb:LeadingKeys"]) == fmt.Sprint(gateKeys) {
					// The claim's gate check: a Query of the gates' partition, and nothing else.
					if a := g.actions(); !slices.Equal(a, []string{"dynamodb:Query"}) {
						t.Errorf("%s: %s may %v on the gates, want dynamodb:Query only", name, role, a)
					}
					continue
				}
				if lambda == "" || fmt.Sprint(like["dynamodb:LeadingKeys"]) != fmt.Sprint(dynamostore.LambdaKeyPatterns(lambda)) || len(cond) != 1 {
					t.Errorf("%s: %s may use the table under condition %v, want its lambda's keys %v only", name, role, cond, dynamostore.LambdaKeyPatterns(lambda))
				}
				for _, r := range list(g.statement["Resource"]) {
					if rs := refs(r); len(rs) != 1 || pathOf(all, rs[0]) != "Store/Table/Resource" {
						t.Errorf("%s: %s's keyed grant is on %v, want the table alone", name, role, r)
					}
				}
				for _, a := range g.actions() {
					if !slices.Contains(statusActions, a) {
						t.Errorf("%s: %s may %s", name, role, a)
					}
				}
				conditioned[role] = true
			}
		}
		for _, e := range reg.Lambdas {
			role := "Lambda-" + e.Name + "/Status/Role/Resource"
			if e.Kind == registry.KindECS {
				role = "Lambda-" + e.Name + "/Executor/Task/TaskRole/Resource"
			}
			if !conditioned[role] {
				t.Errorf("%s: %s has no keyed grant on the table", name, role)
			}
		}
	}
}

// TestDeleteItemOnlyWhereUsed: the API function, whose creates tidy up rejected payload items and
// whose gates and schedules are deleted so, and the consumer, whose schedules' firings create
// tasks as the API does, are the roles allowed dynamodb:DeleteItem.
func TestDeleteItemOnlyWhereUsed(t *testing.T) {
	for name, s := range environments(t) {
		var deleters []string
		for _, g := range grants(s) {
			if slices.Contains(g.actions(), "dynamodb:DeleteItem") || slices.Contains(g.actions(), "dynamodb:*") {
				deleters = append(deleters, g.roles...)
			}
		}
		if deleters = slices.Compact(slices.Sorted(slices.Values(deleters))); !slices.Equal(deleters, []string{"ApiFunction/Role/Resource", "Consumer/Role/Resource"}) {
			t.Errorf("%s: roles with DeleteItem %v, want the API function's and the consumer's only", name, deleters)
		}
	}
}

// checkUpstreamReads fails unless a grant on every lambda's task items is the read of their state
// that a claim makes for its task's upstreams: BatchGetItem of dynamostore.StateAttributes only.
func checkUpstreamReads(t *testing.T, name, role string, actions []string, cond map[string]any) {
	t.Helper()
	for _, a := range actions {
		if !slices.Contains(upstreamReadActions, a) {
			t.Errorf("%s: %s may %s on every lambda's tasks", name, role, a)
		}
	}
	equals, _ := cond["ForAllValues:StringEquals"].(map[string]any)
	sel, _ := cond["StringEqualsIfExists"].(map[string]any)
	null, _ := cond["Null"].(map[string]any)
	if fmt.Sprint(equals["dynamodb:Attributes"]) != fmt.Sprint(dynamostore.StateAttributes) || sel["dynamodb:Select"] != "SPECIFIC_ATTRIBUTES" || null["dynamodb:Attributes"] != "false" || len(cond) != 4 {
		t.Errorf("%s: %s reads every lambda's tasks under %v; want their state attributes only", name, role, cond)
	}
	if slices.Contains(dynamostore.StateAttributes, "payload") {
		t.Errorf("the state attributes hold the payload")
	}
}

// TestIsolationAcrossStacks: in every environment, each lambda stack's roles reach only their own
// lambda's queues, functions and logs, the core's table under their own lambda's keys (or the
// upstream and gate reads a claim makes), and the core's event bus: nothing of another lambda,
// whichever stack it is in, and nothing by a pattern. No stack exports or imports anything.
func TestIsolationAcrossStacks(t *testing.T) {
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		checkIsolationAcrossStacks(t, name, s, reg)
	}
}

// checkIsolationAcrossStacks is TestIsolationAcrossStacks on one environment.
func checkIsolationAcrossStacks(t *testing.T, env string, s *synthesized, reg *registry.Registry) {
	t.Helper()
	all := s.json["Resources"].(map[string]any)
	for stack, tpl := range s.templates {
		b, err := json.Marshal(tpl)
		must(err)
		if strings.Contains(string(b), "Fn::ImportValue") || strings.Contains(string(b), `"Export"`) {
			t.Errorf("%s: %s exports or imports a value: stacks reach each other by names only", env, stack)
		}
		if stack == "atf-"+env {
			continue
		}
		team, entries := reg.Stack(strings.TrimPrefix(stack, "atf-"+env+"-"))
		own := map[string]bool{}
		for _, e := range entries {
			own[e.Name] = true
		}
		resources := tpl["Resources"].(map[string]any)
		for _, p := range resources {
			p := p.(map[string]any)
			if p["Type"] != "AWS::IAM::Policy" {
				continue
			}
			var roles []string
			for _, r := range refs(props(p)["Roles"]) {
				roles = append(roles, pathOf(all, r))
			}
			for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
				st := st.(map[string]any)
				if st["Effect"] != "Allow" {
					continue
				}
				for _, role := range roles {
					lambda := lambdaOf(role)
					if !own[lambda] {
						t.Errorf("%s: %s (team %s) has role %s of no lambda of its own", env, stack, team, role)
						continue
					}
					checkStatementReach(t, env, role, lambda, st, all)
				}
			}
		}
	}
}

// checkStatementReach fails unless the statement st of role (of lambda) reaches only lambda's own
// resources, the table under lambda's keys or a claim's reads, the event bus, or Resource "*" for
// ecr:GetAuthorizationToken (which has no resource-level permissions).
func checkStatementReach(t *testing.T, env, role, lambda string, st, all map[string]any) {
	t.Helper()
	for _, r := range list(st["Resource"]) {
		if r == "*" {
			if a := fmt.Sprint(st["Action"]); a != "ecr:GetAuthorizationToken" {
				t.Errorf("%s: %s may %s on *", env, role, a)
			}
			continue
		}
		rs := refs(r)
		if len(rs) == 0 {
			t.Errorf("%s: %s may act on %v", env, role, r)
		}
		for _, id := range rs {
			switch p := pathOf(all, id); {
			case p == "":
				// A pseudo parameter inside an ARN of a resource of its own (such as
				// <function ARN>:*): the resource itself is checked as its own reference.
			case strings.HasPrefix(p, "Lambda-"):
				if lambdaOf(p) != lambda {
					t.Errorf("%s: %s (lambda %s) may act on %s, another lambda's", env, role, lambda, p)
				}
			case p == "Store/Table/Resource":
				cond, _ := st["Condition"].(map[string]any)
				like, _ := cond["ForAllValues:StringLike"].(map[string]any)
				equals, _ := cond["ForAllValues:StringEquals"].(map[string]any)
				keys := fmt.Sprint(like["dynamodb:LeadingKeys"])
				ownKeys := keys == fmt.Sprint(dynamostore.LambdaKeyPatterns(lambda))
				upstreams := keys == fmt.Sprint(upstreamKeys) && fmt.Sprint(equals["dynamodb:Attributes"]) == fmt.Sprint(dynamostore.StateAttributes)
				gates := fmt.Sprint(equals["dynamodb:LeadingKeys"]) == fmt.Sprint(gateKeys)
				if !ownKeys && !upstreams && !gates {
					t.Errorf("%s: %s (lambda %s) may use the table under %v, not its own keys", env, role, lambda, cond)
				}
			case p == eventBusPath:
				if a := fmt.Sprint(st["Action"]); a != putEvents {
					t.Errorf("%s: %s may %s on the bus", env, role, a)
				}
			default:
				t.Errorf("%s: %s (lambda %s) may act on %s, outside its stack", env, role, lambda, p)
			}
		}
	}
}
