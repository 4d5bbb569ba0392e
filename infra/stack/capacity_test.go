package stack

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/store/dynamostore"
)

// The tests of the table's capacity mode (Environment.Capacity).

// TestTableCapacity: without capacity, or with mode on_demand, the table and its indexes are
// billed on demand, with no provisioned throughput and no scaling; with mode provisioned, the
// table and each index start at the minimums, and the read and the write capacity of each scale
// on their own between the bounds, tracking the target utilization; cdk-nag finds nothing.
func TestTableCapacity(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "a", "handler": "echo", "priorities": ["normal"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := mustEnvs(t)["dev"]
	onDemand, provisioned := base, base
	base.Capacity = nil
	onDemand.Capacity = &Capacity{Mode: CapacityOnDemand}
	provisioned.Capacity = &Capacity{Mode: CapacityProvisioned, Read: &CapacityRange{Min: 5, Max: 4000},
		Write: &CapacityRange{Min: 10, Max: 40000}, TargetUtilizationPercent: 70}
	envs := synth(t, map[string]Environment{"absent": base, "ondemand": onDemand, "provisioned": provisioned}, reg)

	table := func(s *synthesized) (string, map[string]any) {
		t.Helper()
		tables := s.resources("AWS::DynamoDB::Table")
		if len(tables) != 1 {
			t.Fatalf("%d tables, want 1", len(tables))
		}
		for id, r := range tables {
			return id, props(r)
		}
		return "", nil
	}
	// scaling is each dynamodb scalable target as "<resource> <dimension> min..max, <policy>".
	scaling := func(s *synthesized) []string {
		policies := map[string]string{}
		for _, p := range s.resources("AWS::ApplicationAutoScaling::ScalingPolicy") {
			pp := props(p)
			c, _ := pp["TargetTrackingScalingPolicyConfiguration"].(map[string]any)
			metric, _ := c["PredefinedMetricSpecification"].(map[string]any)
			policies[ref(pp["ScalingTargetId"])] = fmt.Sprintf("%v %v %v", pp["PolicyType"], metric["PredefinedMetricType"], c["TargetValue"])
		}
		var out []string
		for id, r := range s.resources("AWS::ApplicationAutoScaling::ScalableTarget") {
			p := props(r)
			if p["ServiceNamespace"] != "dynamodb" {
				continue
			}
			out = append(out, fmt.Sprintf("%s %v %v..%v, %s", joinedRefs(p["ResourceId"]), p["ScalableDimension"], p["MinCapacity"], p["MaxCapacity"], policies[id]))
		}
		slices.Sort(out)
		return out
	}

	for _, name := range []string{"absent", "ondemand"} {
		s := envs[name]
		_, p := table(s)
		if p["BillingMode"] != "PAY_PER_REQUEST" || p["ProvisionedThroughput"] != nil {
			t.Errorf("%s: billing %v, provisioned %v; want PAY_PER_REQUEST and none", name, p["BillingMode"], p["ProvisionedThroughput"])
		}
		for _, g := range list(p["GlobalSecondaryIndexes"]) {
			if pt := g.(map[string]any)["ProvisionedThroughput"]; pt != nil {
				t.Errorf("%s: index %v provisioned %v", name, g.(map[string]any)["IndexName"], pt)
			}
		}
		if got := scaling(s); len(got) != 0 {
			t.Errorf("%s: the table scales: %v", name, got)
		}
	}
	_, absent := table(envs["absent"])
	_, explicit := table(envs["ondemand"])
	for _, named := range []string{"TableName", "Tags"} { // the environment's name
		delete(absent, named)
		delete(explicit, named)
	}
	if !reflect.DeepEqual(absent, explicit) {
		t.Errorf("mode on_demand makes another table than no capacity:\n%v\n%v", explicit, absent)
	}

	s := envs["provisioned"]
	id, p := table(s)
	want := map[string]any{"ReadCapacityUnits": 5.0, "WriteCapacityUnits": 10.0}
	// No BillingMode is CloudFormation's default, PROVISIONED, which CDK leaves out.
	if p["BillingMode"] != nil || !reflect.DeepEqual(p["ProvisionedThroughput"], want) {
		t.Errorf("provisioned: billing %v, throughput %v; want none (provisioned), %v", p["BillingMode"], p["ProvisionedThroughput"], want)
	}
	gsis := list(p["GlobalSecondaryIndexes"])
	if len(gsis) != len(dynamostore.TableInput("x").GlobalSecondaryIndexes) {
		t.Errorf("provisioned: %d indexes, want dynamostore.TableInput's %d", len(gsis), len(dynamostore.TableInput("x").GlobalSecondaryIndexes))
	}
	for _, g := range gsis {
		if pt := g.(map[string]any)["ProvisionedThroughput"]; !reflect.DeepEqual(pt, want) {
			t.Errorf("provisioned: index %v throughput %v, want %v", g.(map[string]any)["IndexName"], pt, want)
		}
	}
	var wantScaling []string
	add := func(resource, kind string) {
		wantScaling = append(wantScaling,
			"table/${"+id+"}"+resource+" dynamodb:"+kind+":ReadCapacityUnits 5..4000, TargetTrackingScaling DynamoDBReadCapacityUtilization 70",
			"table/${"+id+"}"+resource+" dynamodb:"+kind+":WriteCapacityUnits 10..40000, TargetTrackingScaling DynamoDBWriteCapacityUtilization 70")
	}
	add("", "table")
	for _, g := range dynamostore.TableInput("x").GlobalSecondaryIndexes {
		add("/index/"+*g.IndexName, "index")
	}
	slices.Sort(wantScaling)
	if got := scaling(s); !slices.Equal(got, wantScaling) {
		t.Errorf("provisioned: scaling\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantScaling, "\n"))
	}
	for name := range envs {
		if errs := envs[name].nagErrors("atf-" + name); len(errs) > 0 {
			t.Errorf("%s: cdk-nag: %v", name, errs)
		}
	}
}

// TestCapacityChecked: the capacity of an environment is checked field by field, and read from
// the environments file as written.
func TestCapacityChecked(t *testing.T) {
	good := func() *Capacity {
		return &Capacity{Mode: CapacityProvisioned, Read: &CapacityRange{Min: 1, Max: 1}, Write: &CapacityRange{Min: 1, Max: 100}, TargetUtilizationPercent: 70}
	}
	for name, tc := range map[string]struct {
		change func(c *Capacity)
		want   string
	}{
		"unknown mode":        {func(c *Capacity) { c.Mode = "reserved" }, `capacity.mode "reserved": want "on_demand" or "provisioned"`},
		"no read":             {func(c *Capacity) { c.Read = nil }, "capacity.read is missing"},
		"no write":            {func(c *Capacity) { c.Write = nil }, "capacity.write is missing"},
		"zero minimum":        {func(c *Capacity) { c.Read.Min = 0 }, "capacity.read: want 1 ≤ min ≤ max, got min 0 and max 1"},
		"maximum under min":   {func(c *Capacity) { c.Write.Min = 101 }, "capacity.write: want 1 ≤ min ≤ max, got min 101 and max 100"},
		"target too low":      {func(c *Capacity) { c.TargetUtilizationPercent = 19 }, "target_utilization_percent must be in 20..90, got 19"},
		"target too high":     {func(c *Capacity) { c.TargetUtilizationPercent = 91 }, "target_utilization_percent must be in 20..90, got 91"},
		"on demand, bounded":  {func(c *Capacity) { c.Mode = CapacityOnDemand }, `capacity: read, write and target_utilization_percent are for mode "provisioned" only`},
		"on demand, targeted": {func(c *Capacity) { *c = Capacity{Mode: CapacityOnDemand, TargetUtilizationPercent: 70} }, "for mode \"provisioned\" only"},
	} {
		e := mustEnvs(t)["dev"]
		e.Capacity = good()
		tc.change(e.Capacity)
		if err := e.Validate("dev"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	for _, c := range []*Capacity{nil, {Mode: CapacityOnDemand}, good()} {
		e := mustEnvs(t)["dev"]
		e.Capacity = c
		if err := e.Validate("dev"); err != nil {
			t.Errorf("capacity %+v: %v", c, err)
		}
	}
	var e Environment
	if err := json.Unmarshal([]byte(`{"capacity": {"mode": "provisioned", "read": {"min": 5, "max": 500}, "write": {"min": 5, "max": 1000}, "target_utilization_percent": 70}}`), &e); err != nil {
		t.Fatal(err)
	}
	if c := e.provisioned(); c == nil || *c.Read != (CapacityRange{Min: 5, Max: 500}) || *c.Write != (CapacityRange{Min: 5, Max: 1000}) || c.TargetUtilizationPercent != 70 {
		t.Errorf("read %+v", e.Capacity)
	}
}

// joinedRefs is the string an Fn::Join of strings and Refs makes, each Ref written ${id}.
func joinedRefs(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	m, _ := v.(map[string]any)
	if id, ok := m["Ref"].(string); ok {
		return "${" + id + "}"
	}
	j, _ := m["Fn::Join"].([]any)
	if len(j) != 2 {
		return fmt.Sprint(v)
	}
	var parts []string
	for _, p := range list(j[1]) {
		parts = append(parts, joinedRefs(p))
	}
	return strings.Join(parts, j[0].(string))
}
