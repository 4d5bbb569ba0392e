// Command infra is the CDK app of atf: per environment, the core stack atf-<env> and one stack
// per lambda group of the registry, atf-<env>-<stack> (package stack), from the environments
// file and the lambda registry. cdk.json at the repository's root runs it; its context names the
// files:
//
//	atf:environments   the environments file [infra/environments.json]
//	atf:registry       the lambda registry [lambdas.json]
//	atf:assets         the function zips of `make build` [bin/lambda]
//	atf:root           the repository's root, the executors' Docker context [.]
//	env                the one environment to synthesize; every environment if unset
//	ecs                false leaves the ecs lambdas' executors out (stack.Props.WithoutECS), for
//	                   a deployment without Docker (make deploy-local); true if unset
//	team               only that team's lambda stacks, without the core (make deploy TEAM=)
//	destroy            only an empty stack atf-<env>-<destroy>, a lambda stack no longer in the
//	                   registry, for `cdk destroy` to delete by its name (make destroy STACK=)
//
// Paths are relative to the repository's root, where cdk.json's app command runs the app.
package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/infra/stack"
	"github.com/openatf/atf/shared/registry"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	if err := build(app); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	app.Synth(nil)
}

// build adds the stacks the context asks for to app.
func build(app awscdk.App) error {
	ctx := func(key, def string) string {
		if v, ok := app.Node().TryGetContext(jsii.String(key)).(string); ok && v != "" {
			return v
		}
		return def
	}
	envs, err := stack.LoadEnvironments(ctx("atf:environments", "infra/environments.json"))
	if err != nil {
		return err
	}
	reg, err := registry.Load(ctx("atf:registry", registry.File))
	if err != nil {
		return err
	}
	// Over every environment, whichever the app builds: deploying one adds to what the others
	// of its account reserve.
	if err := stack.CheckSharedAccounts(envs, reg); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(envs))
	if only := ctx("env", ""); only != "" {
		if _, ok := envs[only]; !ok {
			return fmt.Errorf("-c env=%s: no such environment; there are %s", only, strings.Join(names, ", "))
		}
		names = []string{only}
	}
	var withoutECS bool
	ecs := ctx("ecs", "true")
	if b, ok := app.Node().TryGetContext(jsii.String("ecs")).(bool); ok { // as cdk.json's context may say
		ecs = fmt.Sprint(b)
	}
	switch ecs {
	case "true":
	case "false":
		withoutECS = true
	default:
		return fmt.Errorf("-c ecs=%s: true or false", ecs)
	}
	if removed := ctx("destroy", ""); removed != "" {
		return destroyable(app, envs, names, reg, removed)
	}
	for _, name := range names {
		e := envs[name]
		stack.New(app, stack.Props{
			StackProps: awscdk.StackProps{Env: placement(e)},
			Name:       name, Env: e, Registry: reg,
			Assets:     ctx("atf:assets", "bin/lambda"),
			Root:       ctx("atf:root", "."),
			WithoutECS: withoutECS,
			Team:       ctx("team", ""),
		})
	}
	return nil
}

// destroyable adds, for each environment of names, an empty stack named like the lambda stack
// removed, which the registry no longer has: CDK deletes a stack only if the app has it, and the
// app synthesizes the registry's stacks alone. Refused for a stack still in the registry: remove
// its lambdas first, or deploy their team.
func destroyable(app awscdk.App, envs map[string]stack.Environment, names []string, reg *registry.Registry, removed string) error {
	if slices.Contains(reg.Stacks(), removed) {
		return fmt.Errorf("-c destroy=%s: the registry still has stack %s; remove its lambdas from the registry first", removed, removed)
	}
	for _, name := range names {
		awscdk.NewStack(app, jsii.String(stack.StackName(name, removed)), &awscdk.StackProps{Env: placement(envs[name])})
	}
	return nil
}

// placement is the account and region of an environment: its own, or those of the CLI's
// credentials, or none (an environment-agnostic stack, which synthesizes offline).
func placement(e stack.Environment) *awscdk.Environment {
	account, region := e.Account, e.Region
	// The CLI sets both with credentials, and only a default region without: offline, a stack
	// stays environment-agnostic unless its configuration names a place.
	if account == "" && os.Getenv("CDK_DEFAULT_ACCOUNT") != "" {
		account = os.Getenv("CDK_DEFAULT_ACCOUNT")
		if region == "" {
			region = os.Getenv("CDK_DEFAULT_REGION")
		}
	}
	if account == "" && region == "" {
		return nil
	}
	env := &awscdk.Environment{}
	if account != "" {
		env.Account = jsii.String(account)
	}
	if region != "" {
		env.Region = jsii.String(region)
	}
	return env
}
