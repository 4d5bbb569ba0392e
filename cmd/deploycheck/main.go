// Command deploycheck checks a deployed atf stack against the template it was deployed from,
// through the AWS API (package shared/testkit/deployed): `make deploy-local` runs it on the dev
// stack deployed into moto. It is test tooling, not part of atf.
//
//	deploycheck -stack atf-dev -template cdk.out/atf-dev.template.json   check; exit 1 on a problem
//	deploycheck -stack atf-dev -json                                     print the stack's outputs and
//	                                                                     physical ids as JSON, no check
//
// The endpoint, region and credentials are the AWS SDK's (AWS_ENDPOINT_URL and the rest).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/openatf/atf/shared/testkit/deployed"
)

func main() {
	stackName := flag.String("stack", "atf-dev", "the stack's name")
	template := flag.String("template", "", "the template it was deployed from (cdk.out/<stack>.template.json)")
	asJSON := flag.Bool("json", false, "print the stack's outputs and resources as JSON, and check nothing")
	verbose := flag.Bool("v", false, "list every resource verified")
	timeout := flag.Duration("timeout", 2*time.Minute, "the longest the whole check may take")
	flag.Parse()
	if err := run(*stackName, *template, *asJSON, *verbose, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "deploycheck:", err)
		os.Exit(1)
	}
}

func run(stackName, template string, asJSON, verbose bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	clients := deployed.NewClients(cfg)
	st, err := deployed.Read(ctx, clients.CloudFormation, stackName)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if template == "" {
		return fmt.Errorf("-template is required to check")
	}
	tpl, err := deployed.LoadTemplate(template)
	if err != nil {
		return err
	}
	r := deployed.Check(ctx, clients, tpl, st)
	fmt.Printf("deploycheck: stack %s against %s: %d resources verified through the AWS API\n", stackName, template, len(r.Verified))
	if verbose {
		for _, v := range r.Verified {
			fmt.Println("  ok  ", v)
		}
	}
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Println(title)
		for _, l := range lines {
			fmt.Println("  -", l)
		}
	}
	section("not applied by the emulator (nothing to verify):", r.NotApplied)
	section("not verified, by choice:", r.NotVerified)
	section("applied otherwise than on AWS (known to the check):", r.Differences)
	if !r.OK() {
		slices.Sort(r.Problems)
		section(fmt.Sprintf("PROBLEMS (%d):", len(r.Problems)), r.Problems)
		return fmt.Errorf("stack %s does not match its template: %d problems", stackName, len(r.Problems))
	}
	fmt.Printf("deploycheck: stack %s matches its template\n", stackName)
	return nil
}
