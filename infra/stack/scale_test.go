package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openatf/atf/infra/scale"
	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/registry"
)

// The limits the stacks of the scale environment must stay well under: CloudFormation takes 500
// resources, 1 MB of template (from S3), 200 outputs and 200 parameters a stack.
const (
	maxStackResources  = 450
	maxTemplateBytes   = 512 << 10
	maxStackOutputs    = 20
	maxStackParameters = 20
)

var (
	scaleOnce    sync.Once
	scaleFixture *synthesized
	scaleErr     error
)

// scaleEnvironment is prod (alarms, events, NAT gateways: the most resources per lambda) with
// the account concurrency that 300 lambdas need.
func scaleEnvironment(t *testing.T) Environment {
	e := mustEnvs(t)["prod"]
	e.AccountConcurrency = scale.AccountConcurrency
	return e
}

// scaled synthesizes prod from the registry of package scale (300 lambdas of 30 teams), once.
func scaled(t *testing.T) *synthesized {
	t.Helper()
	scaleOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				scaleErr = fmt.Errorf("synth panicked: %v", r)
			}
		}()
		reg, err := registry.Parse(scale.Registry(scale.Lambdas, scale.Teams))
		if err != nil {
			scaleErr = err
			return
		}
		scaleFixture = synth(t, map[string]Environment{"prod": scaleEnvironment(t)}, reg)["prod"]
	})
	if scaleErr != nil {
		t.Fatal(scaleErr)
	}
	return scaleFixture
}

// TestScale: 300 lambdas of 30 teams synthesize into the core and a stack per team, each well
// under CloudFormation's limits, cdk-nag clean; their parameters list every lambda once.
func TestScale(t *testing.T) {
	s := scaled(t)
	reg, err := registry.Parse(scale.Registry(scale.Lambdas, scale.Teams))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.stacks.Lambdas); n != scale.Teams {
		t.Errorf("%d lambda stacks, want one per team, %d", n, scale.Teams)
	}
	most := 0
	for _, st := range s.stacks.All() {
		name := *st.StackName()
		tpl := s.templates[name]
		b, err := os.ReadFile(s.outdir + "/" + *st.ArtifactId() + ".template.json")
		if err != nil {
			t.Fatal(err)
		}
		resources, _ := tpl["Resources"].(map[string]any)
		outputs, _ := tpl["Outputs"].(map[string]any)
		parameters, _ := tpl["Parameters"].(map[string]any)
		if len(resources) > maxStackResources || len(b) > maxTemplateBytes || len(outputs) > maxStackOutputs || len(parameters) > maxStackParameters {
			t.Errorf("%s: %d resources, %d bytes, %d outputs, %d parameters; want at most %d, %d, %d, %d",
				name, len(resources), len(b), len(outputs), len(parameters), maxStackResources, maxTemplateBytes, maxStackOutputs, maxStackParameters)
		}
		most = max(most, len(resources))
		for _, e := range s.nagErrors(name) {
			t.Errorf("%s: %s", name, e)
		}
	}
	t.Logf("%d lambdas in %d stacks; the largest has %d resources", scale.Lambdas, len(s.stacks.All()), most)
	checkIsolationAcrossStacks(t, "prod", s, reg)

	// One parameter per lambda stack, under the path, listing exactly its lambdas.
	var listed []string
	for _, p := range s.resources("AWS::SSM::Parameter") {
		name, _ := props(p)["Name"].(string)
		stack, ok := strings.CutPrefix(name, awsfn.LambdasPath("prod"))
		if !ok {
			continue // the executors' network, written by the core
		}
		var specs []awsfn.LambdaSpec
		must(json.Unmarshal([]byte(props(p)["Value"].(string)), &specs))
		_, entries := reg.Stack(stack)
		var want []string
		for _, e := range entries {
			want = append(want, e.Name)
		}
		var got []string
		for _, sp := range specs {
			got = append(got, sp.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("parameter %s lists %v, want %v", name, got, want)
		}
		if props(p)["Type"] != "String" || props(p)["Tier"] != "Standard" {
			t.Errorf("parameter %s: type %v, tier %v; want a standard String", name, props(p)["Type"], props(p)["Tier"])
		}
		listed = append(listed, got...)
	}
	if len(listed) != scale.Lambdas {
		t.Errorf("the parameters list %d lambdas, want %d", len(listed), scale.Lambdas)
	}
}

// TestScaleAddTeam: adding a 301st lambda in a new team adds one stack, and leaves every
// existing template byte-identical: a team deploys alone, and no other stack changes.
func TestScaleAddTeam(t *testing.T) {
	before := scaled(t)
	reg, err := registry.Parse(scale.Add(scale.Registry(scale.Lambdas, scale.Teams), "newcomer", "new-team"))
	if err != nil {
		t.Fatal(err)
	}
	after := synth(t, map[string]Environment{"prod": scaleEnvironment(t)}, reg)["prod"]
	var names []string
	for _, st := range before.stacks.All() {
		names = append(names, *st.StackName())
		assertSameTemplate(t, before, after, *st.StackName())
	}
	var added []string
	for _, st := range after.stacks.All() {
		if !slices.Contains(names, *st.StackName()) {
			added = append(added, *st.StackName())
		}
	}
	if !slices.Equal(added, []string{"atf-prod-new-team"}) {
		t.Errorf("stacks added %v, want [atf-prod-new-team]", added)
	}
}
