package stack

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/registry"
)

// The tests of what a new account needs: environments that reserve no concurrency, and
// environments sharing an account.

// TestFreshAccount: with a new account's limit of 10, dev (reserved_concurrency false)
// synthesizes every stack of the registry, and no function of any of them reserves concurrency;
// an environment that reserves is refused there, saying to turn reservations off.
func TestFreshAccount(t *testing.T) {
	e := mustEnvs(t)["dev"]
	if e.ReservedConcurrency {
		t.Fatal("dev reserves concurrency: reserved_concurrency must be false in dev")
	}
	e.AccountConcurrency = MinAccountConcurrency
	if err := e.Validate("dev"); err != nil {
		t.Fatal(err)
	}
	s := synth(t, map[string]Environment{"dev": e}, mustLoadRegistry(t))["dev"]
	fns := s.resources("AWS::Lambda::Function")
	if len(fns) == 0 {
		t.Fatal("dev has no function")
	}
	for _, fn := range fns {
		if r, ok := props(fn)["ReservedConcurrentExecutions"]; ok {
			t.Errorf("dev on a new account: %s reserves %v", path(fn), r)
		}
	}

	e.ReservedConcurrency = true
	defer func() {
		want := "environment dev: the functions reserve a concurrency of"
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) || !strings.Contains(fmt.Sprint(r), "set reserved_concurrency false") {
			t.Errorf("New panicked with %v, want %q and the way out", r, want)
		}
	}()
	root := standIn(t)
	New(newApp(t.TempDir()), Props{Name: "dev", Env: e, Registry: mustLoadRegistry(t), Assets: filepath.Join(root, "bin", "lambda"), Root: root})
}

// TestSharedAccounts: environments placed in one account and region add up their
// reservations, which must fit the account's limit together though each fits alone; an
// environment that reserves nothing, or one placed elsewhere, adds nothing; and environments of one
// account must agree on its limit.
func TestSharedAccounts(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "a", "handler": "echo", "priorities": ["normal"], "concurrency": 1, "function": {"max_concurrency": {"normal": 300}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	placed := func(name, account, region string, reserves bool) Environment {
		e := mustEnvs(t)[name]
		e.Account, e.Region, e.ReservedConcurrency = account, region, reserves
		return e
	}
	const account, other = "111111111111", "222222222222"
	if err := checkConcurrency(placed("staging", account, "us-east-1", true), reg); err != nil {
		t.Fatalf("one environment alone: %v", err)
	}
	for name, tc := range map[string]struct {
		envs map[string]Environment
		want string // "" for none
	}{
		"sharing": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", account, "us-east-1", true), "dev": placed("dev", account, "us-east-1", false),
		}, "environments prod, staging share account 111111111111 in us-east-1: their functions' reserved concurrency 602 plus the event source mappings' MaximumConcurrency 600 is 1202, over the account's concurrency limit 1000"},
		"other regions": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", account, "eu-west-1", true),
		}, ""},
		"other accounts": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", true), "prod": placed("prod", other, "us-east-1", true),
		}, ""},
		"unplaced": {map[string]Environment{
			"staging": placed("staging", "", "", true), "prod": placed("prod", "", "", true),
		}, ""},
		"one reserving": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", false), "prod": placed("prod", account, "us-east-1", true),
		}, ""},
		"limits differ": {map[string]Environment{
			"staging": placed("staging", account, "us-east-1", false), "prod": func() Environment {
				e := placed("prod", account, "us-east-1", true)
				e.AccountConcurrency = 2000
				return e
			}(),
		}, "environments prod, staging share account 111111111111 in us-east-1 but not its concurrency limit: account_concurrency 2000 (prod) and 1000 (staging)"},
	} {
		err := CheckSharedAccounts(tc.envs, reg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
