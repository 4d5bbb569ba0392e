// Command gen writes the registry of package scale (300 lambdas in 30 teams) and the
// environments that can hold it, for `make synth REGISTRY=... ENVIRONMENTS=...`:
//
//	go -C infra run ./scale/gen <dir>    writes <dir>/lambdas.json and <dir>/environments.json
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/openatf/atf/infra/scale"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen <dir>")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	envs, err := os.ReadFile("environments.json") // infra/, where go -C infra runs
	if err != nil {
		return err
	}
	if envs, err = scale.Environments(envs); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "environments.json"), envs, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "lambdas.json"), scale.Registry(scale.Lambdas, scale.Teams), 0o644)
}
