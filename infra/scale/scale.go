// Package scale generates the registry of a large environment, for the checks that atf's stacks
// stay within CloudFormation's limits at the scale the project aims for (300 lambdas of 30
// teams): the template assertions of package stack, and `make infra-test`'s cfn-lint (gen).
package scale

import (
	"encoding/json"
	"fmt"
)

// Lambdas is the scale the stacks are checked at, and Teams how many teams own them.
const (
	Lambdas = 300
	Teams   = 30
)

// AccountConcurrency is the Lambda concurrency limit an account needs for Lambdas lambdas of
// Registry's mix (the status functions' reservations plus the event source mappings' maximums,
// about 8,100), raised from AWS's default 1,000 as such an environment must be.
const AccountConcurrency = 10000

// Registry returns a registry of lambdas lambdas, spread evenly over teams teams (team-00,
// team-01, ...), each with the defaults of an entry (three priorities, kind function); the last
// lambda of each team is of kind ecs.
func Registry(lambdas, teams int) []byte {
	type entry struct {
		Name    string `json:"name"`
		Team    string `json:"team"`
		Kind    string `json:"kind,omitempty"`
		Handler string `json:"handler"`
		Timeout string `json:"timeout,omitempty"`
	}
	var entries []entry
	perTeam := (lambdas + teams - 1) / teams
	for i := range lambdas {
		team, n := i/perTeam, i%perTeam
		e := entry{Name: fmt.Sprintf("t%02d-lambda-%02d", team, n), Team: fmt.Sprintf("team-%02d", team), Handler: "echo"}
		if n == perTeam-1 {
			e.Kind, e.Handler, e.Timeout = "ecs", "sleep", "1h"
		}
		entries = append(entries, e)
	}
	b, err := json.MarshalIndent(map[string]any{"lambdas": entries}, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// Add returns registry with one more lambda, of kind function, in a team of its own.
func Add(registry []byte, name, team string) []byte {
	var file map[string][]map[string]any
	if err := json.Unmarshal(registry, &file); err != nil {
		panic(err)
	}
	file["lambdas"] = append(file["lambdas"], map[string]any{"name": name, "team": team, "handler": "echo"})
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// Environments returns the environments file environments with every environment's
// account_concurrency set to AccountConcurrency.
func Environments(environments []byte) ([]byte, error) {
	var envs map[string]map[string]any
	if err := json.Unmarshal(environments, &envs); err != nil {
		return nil, err
	}
	for _, e := range envs {
		e["account_concurrency"] = AccountConcurrency
	}
	return json.MarshalIndent(envs, "", "  ")
}
