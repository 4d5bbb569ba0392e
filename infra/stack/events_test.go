package stack

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/registry"
)

const (
	putEvents    = "events:PutEvents"
	eventBusPath = "Events/Bus/Resource"
)

// TestEvents: an environment with events has its bus (atf-<env>), an archive of every atf event
// on it kept as long as it says, and the example rule sending failed, dead and upstream_failed
// events to its queue, which only that rule may send to. Exactly the roles that write the table
// (the API and consumer functions, each status function, each executor) may put events, on that
// bus alone, and their functions name it in ATF_EVENT_BUS; workers may not and do not. An
// environment without events has none of it. The lambda stacks reach the core's bus by its name
// (atf-<env>), the core by reference.
func TestEvents(t *testing.T) {
	envs := mustEnvs(t)
	reg := mustLoadRegistry(t)
	for name, s := range environments(t) {
		all := s.json["Resources"].(map[string]any)
		buses := s.resources("AWS::Events::EventBus")
		putters := map[string]bool{} // role paths
		for _, p := range s.resources("AWS::IAM::Policy") {
			for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
				st := st.(map[string]any)
				if !slices.Contains(list(st["Action"]), any(putEvents)) {
					continue
				}
				if len(list(st["Action"])) != 1 || len(list(st["Resource"])) != 1 || len(refs(st["Resource"])) != 1 || pathOf(all, refs(st["Resource"])[0]) != eventBusPath {
					t.Errorf("%s: a statement allows %v on %v: want events:PutEvents alone, on the bus alone", name, st["Action"], st["Resource"])
				}
				for _, r := range refs(props(p)["Roles"]) {
					putters[pathOf(all, r)] = true
				}
			}
		}
		env := envs[name].Events
		if env == nil {
			if len(buses) != 0 || len(putters) != 0 || len(s.resources("AWS::Events::Archive")) != 0 {
				t.Errorf("%s has no events, yet %d buses and roles %v that put events", name, len(buses), putters)
			}
			for id, fn := range s.resources("AWS::Lambda::Function") {
				if v := props(fn)["Environment"].(map[string]any)["Variables"].(map[string]any)[awsfn.EnvEventBus]; v != nil {
					t.Errorf("%s: %s names an event bus, %v", name, id, v)
				}
			}
			continue
		}
		if len(buses) != 1 {
			t.Fatalf("%s: %d event buses, want 1", name, len(buses))
		}
		var busID string
		for id, b := range buses {
			busID = id
			if props(b)["Name"] != "atf-"+name {
				t.Errorf("%s: bus named %v", name, props(b)["Name"])
			}
		}
		archives := s.resources("AWS::Events::Archive")
		if len(archives) != 1 {
			t.Fatalf("%s: %d archives, want 1", name, len(archives))
		}
		for _, a := range archives {
			p := props(a)
			if ref(p["SourceArn"]) != busID || p["RetentionDays"] != float64(env.ArchiveRetentionDays) || !slices.Equal(list(p["EventPattern"].(map[string]any)["source"]), []any{"atf"}) {
				t.Errorf("%s: archive %v: want every atf event of the bus, kept %d days", name, p, env.ArchiveRetentionDays)
			}
		}
		var queueID string
		for id, q := range s.resources("AWS::SQS::Queue") {
			if props(q)["QueueName"] == "atf-"+name+"-events-failed" {
				queueID = id
			}
		}
		rules := 0
		for _, r := range s.resources("AWS::Events::Rule") {
			p := props(r)
			if ref(p["EventBusName"]) != busID {
				continue
			}
			rules++
			pattern := p["EventPattern"].(map[string]any)
			if !slices.Equal(list(pattern["source"]), []any{"atf"}) || !slices.Equal(list(pattern["detail-type"]), []any{"task.failed", "task.dead", "task.upstream_failed"}) {
				t.Errorf("%s: example rule's pattern %v", name, pattern)
			}
			targets := list(p["Targets"])
			if len(targets) != 1 || ref(targets[0].(map[string]any)["Arn"]) != queueID {
				t.Errorf("%s: example rule's targets %v, want its queue", name, targets)
			}
		}
		if rules != 1 || queueID == "" {
			t.Errorf("%s: %d rules on the bus, queue %q: want the example rule and its queue", name, rules, queueID)
		}
		for _, qp := range s.resources("AWS::SQS::QueuePolicy") {
			if !slices.Contains(refs(props(qp)["Queues"]), queueID) {
				continue
			}
			for _, st := range list(props(qp)["PolicyDocument"].(map[string]any)["Statement"]) {
				st := st.(map[string]any)
				if st["Effect"] == "Allow" && !strings.Contains(toJSON(st["Condition"]), "aws:SourceArn") {
					t.Errorf("%s: the example queue allows %v without naming the rule", name, st["Action"])
				}
			}
		}

		want := map[string]bool{"ApiFunction/Role/Resource": true, "Consumer/Role/Resource": true}
		for _, e := range reg.Lambdas {
			switch e.Kind {
			case registry.KindFunction:
				want["Lambda-"+e.Name+"/Status/Role/Resource"] = true
			case registry.KindECS:
				want["Lambda-"+e.Name+"/Executor/Task/TaskRole/Resource"] = true
			}
		}
		if !mapsEqual(putters, want) {
			t.Errorf("%s: roles that may put events %v\nwant %v", name, putters, want)
		}
		for _, fn := range s.resources("AWS::Lambda::Function") {
			p, v := path(fn), props(fn)["Environment"].(map[string]any)["Variables"].(map[string]any)[awsfn.EnvEventBus]
			writes := p == "ApiFunction/Function/Resource" || p == "Consumer/Function/Resource" || strings.HasSuffix(p, "/Status/Function/Resource")
			// The core names its bus by reference, a lambda stack by its known name.
			if writes != (ref(v) == busID || v == "atf-"+name) {
				t.Errorf("%s: %s has %s = %v", name, p, awsfn.EnvEventBus, v)
			}
		}
		for _, td := range s.resources("AWS::ECS::TaskDefinition") {
			for _, c := range list(props(td)["ContainerDefinitions"]) {
				found := false
				for _, kv := range list(c.(map[string]any)["Environment"]) {
					kv := kv.(map[string]any)
					if kv["Name"] == awsfn.EnvEventBus && (ref(kv["Value"]) == busID || kv["Value"] == "atf-"+name) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: executor %s has no %s", name, path(td), awsfn.EnvEventBus)
				}
			}
		}
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
