package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/registry"
)

// TestWithoutECS: Props.WithoutECS (cdk -c ecs=false, for make deploy-local) leaves out exactly
// the ecs lambdas' executors, their image, scaling, network and cluster, says so in a warning,
// and keeps their queues; the same environment without the flag (every other test) keeps them.
func TestWithoutECS(t *testing.T) {
	reg := mustLoadRegistry(t)
	var ecs []registry.Entry
	for _, e := range reg.Lambdas {
		if e.Kind == registry.KindECS {
			ecs = append(ecs, e)
		}
	}
	if len(ecs) == 0 {
		t.Fatal("the registry has no ecs lambda: nothing to leave out")
	}
	full := environments(t)["prod"]
	if len(full.resources("AWS::ECS::Service")) != len(ecs) {
		t.Fatalf("without the flag, prod has %d ECS services, want %d", len(full.resources("AWS::ECS::Service")), len(ecs))
	}

	root := standIn(t)
	outdir := t.TempDir()
	app := newApp(outdir)
	st := New(app, Props{
		Name: "prod", Env: mustEnvs(t)["prod"], Registry: reg,
		Assets: filepath.Join(root, "bin", "lambda"), Root: root, WithoutECS: true,
	})
	s := &synthesized{stacks: st, outdir: outdir}
	s.read()

	withECS := st.Lambdas[ecs[0].Stack]
	assertions.Annotations_FromStack(withECS).HasWarning(jsii.String("/"+*withECS.StackName()),
		assertions.Match_StringLikeRegexp(jsii.String("ecs=false: the executors of the ecs lambdas "+ecs[0].Name+".* are left out")))

	resources := s.json["Resources"].(map[string]any)
	for id, r := range resources {
		typ := r.(map[string]any)["Type"].(string)
		for _, gone := range []string{"AWS::ECS::", "AWS::EC2::", "AWS::ApplicationAutoScaling::", "AWS::ECR::"} {
			if strings.HasPrefix(typ, gone) {
				t.Errorf("%s (%s, %s) is left in", id, typ, path(r.(map[string]any)))
			}
		}
	}
	// Nothing is added, and what is removed belongs to the executors and their network; the
	// lambda's parameter keeps it for the functions that serve every lambda, so its tasks wait
	// in its queues.
	fullResources := full.json["Resources"].(map[string]any)
	for id, r := range resources {
		if _, ok := fullResources[id]; !ok {
			t.Errorf("added %s (%s)", id, path(r.(map[string]any)))
		}
	}
	for id, r := range fullResources {
		if _, ok := resources[id]; ok {
			continue
		}
		p := path(r.(map[string]any))
		isExecutor := strings.HasPrefix(p, "Executors/")
		for _, e := range ecs {
			isExecutor = isExecutor || strings.HasPrefix(p, "Lambda-"+e.Name+"/Executor/")
		}
		if !isExecutor {
			t.Errorf("removed %s (%s), not of an executor", id, p)
		}
	}
	for _, e := range ecs {
		for _, pr := range e.Priorities {
			for _, q := range []string{"Queue-", "Dlq-"} {
				if !hasPath(resources, "Lambda-"+e.Name+"/Queues/"+q+pr+"/Resource") {
					t.Errorf("the queue %s%s of %s is left out", q, pr, e.Name)
				}
			}
		}
	}
	// No image asset: the deployment needs no Docker.
	for _, stack := range st.All() {
		manifest, err := os.ReadFile(filepath.Join(outdir, *stack.ArtifactId()+".assets.json"))
		if err != nil {
			// Written at synth: the app synthesizes once assertions read the stack.
			t.Fatal(err)
		}
		var assets struct{ DockerImages map[string]any }
		must(json.Unmarshal(manifest, &assets))
		if len(assets.DockerImages) != 0 {
			t.Errorf("%s: %d image assets, want none", *stack.StackName(), len(assets.DockerImages))
		}
	}
}

func hasPath(resources map[string]any, p string) bool {
	for _, r := range resources {
		if path(r.(map[string]any)) == p {
			return true
		}
	}
	return false
}
