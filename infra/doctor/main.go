// Command doctor checks the AWS account and region that an environment deploys to, before `make
// deploy` creates anything there, and says what to do about each problem that would fail the
// deploy or leave it unwatched:
//
//	go -C infra run ./doctor -env dev [-environments f] [-registry f] [-qualifier q]
//
// make doctor ENV=<env> runs it, and make deploy runs it first. It checks the credentials (STS
// GetCallerIdentity, and that they are of the environment's account), the Lambda concurrency
// (GetAccountSettings: the account's limit and what is unreserved, against what the
// environment's stacks reserve), that CDK is bootstrapped (the SSM parameter
// /cdk-bootstrap/<qualifier>/version, or the CDKToolkit stack), Docker if the registry has ecs
// lambdas, and that the alarms reach someone. Every AWS call has a deadline (callTimeout). It
// exits 1 if a check failed; a warning does not fail it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/openatf/atf/infra/stack"
	"github.com/openatf/atf/shared/registry"
)

func main() {
	env := flag.String("env", "dev", "the environment to check")
	envsPath := flag.String("environments", "infra/environments.json", "the environments file")
	regPath := flag.String("registry", registry.File, "the lambda registry")
	qualifier := flag.String("qualifier", defaultQualifier, "the CDK bootstrap qualifier")
	flag.Parse()
	d, err := load(*env, *envsPath, *regPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		os.Exit(2)
	}
	d.qualifier = *qualifier
	ctx := context.Background()
	if d.cfg, err = config.LoadDefaultConfig(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "doctor: AWS configuration:", err)
		os.Exit(2)
	}
	if !report(os.Stdout, d.name, d.run(ctx)) {
		os.Exit(1)
	}
}

// load reads the environment called name and the registry, as the CDK app does.
func load(name, envsPath, regPath string) (*doctor, error) {
	envs, err := stack.LoadEnvironments(envsPath)
	if err != nil {
		return nil, err
	}
	e, ok := envs[name]
	if !ok {
		return nil, fmt.Errorf("%s: no environment %q", envsPath, name)
	}
	reg, err := registry.Load(regPath)
	if err != nil {
		return nil, err
	}
	return &doctor{name: name, env: e, reg: reg, docker: []string{"docker", "info", "--format", "{{.ServerVersion}}"}}, nil
}
