package stack

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/registry"
)

// The tests synthesize the stacks of the repository's environments and registry once, on stand-in
// assets (make build is not needed), and read the templates as JSON.

var (
	envsPath     = filepath.Join("..", "environments.json")
	registryPath = filepath.Join("..", "..", registry.File)
)

// synthesized is one environment's stacks: the core's template, each stack's template as JSON,
// and json, every stack's resources in one template (logical ids are unique across an
// environment's stacks: a lambda's resources are under Lambda-<name>, a stack's own under
// <kind>-<stack>), for the assertions that hold across stacks.
type synthesized struct {
	stacks    Stacks
	outdir    string
	template  assertions.Template // the core's
	templates map[string]map[string]any
	nag       map[string][]string // cdk-nag's errors, by stack name
	json      map[string]any
}

// read synthesizes the app of s.stacks once, and reads each stack's template and messages
// from the cloud assembly. (assertions.Template_FromStack would synthesize the whole app again
// for each stack: too slow for an environment of 300 lambdas.)
func (s *synthesized) read() {
	s.templates = map[string]map[string]any{}
	s.nag = map[string][]string{}
	merged := map[string]any{}
	all := s.stacks.All()
	awscdk.Stage_Of(all[0]).Synth(nil)
	// The manifest records each stack's annotations by construct path, as the CLI prints them,
	// in the stack's metadata file.
	type annotations map[string][]struct {
		Type string
		Data any
	}
	var manifest struct {
		Artifacts map[string]struct {
			Metadata               annotations
			AdditionalMetadataFile string
		}
	}
	b, err := os.ReadFile(filepath.Join(s.outdir, "manifest.json"))
	must(err)
	must(json.Unmarshal(b, &manifest))
	for _, st := range all {
		var js map[string]any
		b, err := os.ReadFile(filepath.Join(s.outdir, *st.ArtifactId()+".template.json"))
		must(err)
		must(json.Unmarshal(b, &js))
		if st == s.stacks.Core {
			s.template = assertions.Template_FromJSON(&js, nil)
		}
		s.templates[*st.StackName()] = js
		artifact := manifest.Artifacts[*st.ArtifactId()]
		metadata := annotations{}
		maps.Copy(metadata, artifact.Metadata)
		if artifact.AdditionalMetadataFile != "" {
			more := annotations{}
			b, err := os.ReadFile(filepath.Join(s.outdir, artifact.AdditionalMetadataFile))
			must(err)
			must(json.Unmarshal(b, &more))
			maps.Copy(metadata, more)
		}
		for path, entries := range metadata {
			for _, e := range entries {
				if data := fmt.Sprint(e.Data); e.Type == "aws:cdk:error" && strings.Contains(data, "AwsSolutions-") {
					s.nag[*st.StackName()] = append(s.nag[*st.StackName()], path+": "+data)
				}
			}
		}
		for id, r := range js["Resources"].(map[string]any) {
			if _, ok := merged[id]; ok {
				panic(fmt.Sprintf("logical id %s is in two stacks of the environment", id))
			}
			merged[id] = r
		}
	}
	s.json = map[string]any{"Resources": merged}
}

// nagErrors returns cdk-nag's errors in stack name, as the CLI would print them.
func (s *synthesized) nagErrors(name string) []string { return s.nag[name] }

// templateOf returns the template of the stack of lambda e.
func (s *synthesized) templateOf(e registry.Entry) assertions.Template {
	js := s.templates[*s.stacks.Lambdas[e.Stack].StackName()]
	return assertions.Template_FromJSON(&js, nil)
}

// stackOf returns the name of the stack whose template holds the logical id.
func (s *synthesized) stackOf(id string) string {
	for name, tpl := range s.templates {
		if _, ok := tpl["Resources"].(map[string]any)[id]; ok {
			return name
		}
	}
	return ""
}

// resources returns the template's resources of type typ, by logical id.
func (s *synthesized) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.json["Resources"].(map[string]any) {
		if r := r.(map[string]any); r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

// props returns the Properties of a resource.
func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

var (
	fixtureOnce sync.Once
	fixture     map[string]*synthesized
	fixtureErr  error
)

// environments synthesizes every environment of environments.json with the repository's
// registry, once for all tests.
func environments(t *testing.T) map[string]*synthesized {
	t.Helper()
	fixtureOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				fixtureErr = fmt.Errorf("synth panicked: %v", r)
			}
		}()
		envs, err := LoadEnvironments(envsPath)
		if err != nil {
			fixtureErr = err
			return
		}
		reg, err := registry.Load(registryPath)
		if err != nil {
			fixtureErr = err
			return
		}
		fixture = synth(t, envs, reg)
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixture
}

var (
	rootOnce sync.Once
	root     string
	tempDirs []string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// standIn makes a repository root with stand-in assets of every handler, and the real
// Dockerfile of the executors and programs of functions/programs.
func standIn(t *testing.T) string {
	rootOnce.Do(func() {
		dir, err := os.MkdirTemp("", "atf-infra-test-")
		if err != nil {
			panic(err)
		}
		root = dir
		tempDirs = append(tempDirs, dir)
		assets := filepath.Join(root, "bin", "lambda")
		handlers, _ := filepath.Glob(filepath.Join("..", "..", "functions", "workers", "*"))
		names := []string{"api", "consumer", "status", "executor"}
		for _, h := range handlers {
			names = append(names, "workers-"+filepath.Base(h))
		}
		for _, n := range names {
			must(os.MkdirAll(filepath.Join(assets, n), 0o755))
			must(os.WriteFile(filepath.Join(assets, n, "bootstrap"), []byte("stand-in "+n), 0o755))
			f, err := os.Create(filepath.Join(assets, n+".zip"))
			must(err)
			z := zip.NewWriter(f)
			w, err := z.Create("bootstrap")
			must(err)
			_, err = w.Write([]byte("stand-in " + n))
			must(err)
			must(z.Close())
			must(f.Close())
		}
		// The programs of the registry, which the images of their executors carry.
		programs, _ := filepath.Glob(filepath.Join("..", "..", "functions", "programs", "*"))
		must(os.MkdirAll(filepath.Join(root, "functions", "programs"), 0o755))
		for _, p := range programs {
			b, err := os.ReadFile(p)
			must(err)
			must(os.WriteFile(filepath.Join(root, "functions", "programs", filepath.Base(p)), b, 0o755))
		}
		df, err := os.ReadFile(filepath.Join("..", "executor", "Dockerfile"))
		must(err)
		must(os.MkdirAll(filepath.Join(root, "infra", "executor"), 0o755))
		must(os.WriteFile(filepath.Join(root, "infra", "executor", "Dockerfile"), df, 0o644))
	})
	return root
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// synth builds one app with a stack per environment and synthesizes it.
func synth(t *testing.T, envs map[string]Environment, reg *registry.Registry) map[string]*synthesized {
	root := standIn(t)
	outdir, err := os.MkdirTemp("", "atf-infra-synth-")
	must(err)
	tempDirs = append(tempDirs, outdir)
	app := newApp(outdir)
	out := map[string]*synthesized{}
	for name, e := range envs {
		st := New(app, Props{
			Name: name, Env: e, Registry: reg,
			Assets: filepath.Join(root, "bin", "lambda"), Root: root,
		})
		out[name] = &synthesized{stacks: st, outdir: outdir}
	}
	for _, s := range out {
		s.read()
	}
	return out
}

func mustLoadRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Load(registryPath)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// ref returns the logical id a value refers to ({"Ref": id} or {"Fn::GetAtt": [id, ...]}), or "".
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r
	}
	if g, ok := m["Fn::GetAtt"].([]any); ok && len(g) > 0 {
		s, _ := g[0].(string)
		return s
	}
	return ""
}

// arnOf returns the ARN that v builds from known names (an Fn::Join that FormatArn writes, with
// <AWS::Region> and such for its pseudo parameters), or "".
func arnOf(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	j, ok := m["Fn::Join"].([]any)
	if !ok || len(j) != 2 || j[0] != "" {
		return ""
	}
	var b strings.Builder
	for _, part := range j[1].([]any) {
		switch part := part.(type) {
		case string:
			b.WriteString(part)
		case map[string]any:
			r, ok := part["Ref"].(string)
			if !ok {
				return ""
			}
			b.WriteString("<" + r + ">")
		}
	}
	if !strings.HasPrefix(b.String(), "arn:") {
		return ""
	}
	return b.String()
}

// refs returns every logical id that v refers to, anywhere inside it, and every ARN built from
// known names (arnOf), which pathOf resolves.
func refs(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if a := arnOf(v); a != "" {
				out = append(out, a)
				return
			}
			if r := ref(v); r != "" {
				out = append(out, r)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	slices.Sort(out)
	return slices.Compact(out)
}

// list returns v as a list: itself if it is one, else a list of it.
func list(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

// path returns a resource's construct path below its stack, such as
// Lambda-echo/Queues/Queue-high/Resource.
func path(r map[string]any) string {
	md, _ := r["Metadata"].(map[string]any)
	p, _ := md["aws:cdk:path"].(string)
	_, below, _ := strings.Cut(p, "/")
	return below
}

// newApp returns an app that writes into outdir and records construct paths in the template,
// as the CDK CLI has it do.
func newApp(outdir string) awscdk.App {
	return awscdk.NewApp(&awscdk.AppProps{
		Outdir:  jsii.String(outdir),
		Context: &map[string]any{"aws:cdk:enable-path-metadata": true},
	})
}
