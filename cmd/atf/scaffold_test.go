package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/registry"
)

// TestNewLambda: atf new lambda scaffolds a handler, its registry entry (the rest of lambdas.json
// kept as written), sample tasks and a test, and that test passes. It runs in a module of its own
// that uses this repository, as a deployment's would.
func TestNewLambda(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg, err := os.ReadFile(filepath.Join(root, "lambdas.json"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := "go 1.26"
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		for _, l := range strings.Split(string(mod), "\n") {
			if strings.HasPrefix(l, "go ") {
				goVersion = l
			}
		}
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"lambdas.json": string(reg),
		"go.sum":       string(sum),
		"go.mod": "module example.com/deployment\n\n" + goVersion + "\n\nrequire github.com/openatf/atf v0.0.0\n\n" +
			"replace github.com/openatf/atf => " + root + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	_, updated, r := scaffoldGreet(t, dir)
	if e, ok := r.Lambda("greet"); !ok || e.Handler != "greet" {
		t.Fatalf("greet's entry: %+v, %v", e, ok)
	}
	last := bytes.LastIndex(reg, []byte("}\n  ]"))
	if last < 0 || !bytes.HasPrefix(updated, reg[:last+1]) {
		t.Errorf("the entries before greet's were rewritten:\n%s", updated)
	}
	if err := run([]string{"new", "lambda", "greet", "--dir", dir}, &bytes.Buffer{}); err == nil {
		t.Error("a second greet was scaffolded")
	}
	if err := run([]string{"new", "lambda", "Bad Name", "--dir", dir}, &bytes.Buffer{}); err == nil {
		t.Error("a lambda with a bad name was scaffolded")
	}

	// The scaffolded test passes, offline, on the modules this repository already has.
	cmd := exec.Command("go", "test", "-count=1", "./functions/workers/greet/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if got, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test of the scaffolded lambda: %v\n%s", err, got)
	}
}

// TestNewLambdaInTeamModule: in a module of a team's own, without a lambdas.json yet, atf new
// lambda makes one holding the new lambda, and says first to get atf's packages when go.mod does
// not require them; then how to test, build and run the lambda without atf's Makefile.
func TestNewLambdaInTeamModule(t *testing.T) {
	for _, tc := range []struct {
		mod    string
		getAtf bool
	}{
		{"module example.com/team\n\ngo 1.26\n", true},
		{"module example.com/team\n\ngo 1.26\n\nrequire github.com/openatf/atf v0.3.0\n", false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(tc.mod), 0o644); err != nil {
			t.Fatal(err)
		}
		s, reg, r := scaffoldGreet(t, dir)
		if e, ok := r.Lambda("greet"); !ok || e.Handler != "greet" || len(r.Lambdas) != 1 {
			t.Fatalf("the lambdas.json made: %s", reg)
		}
		next := strings.Join(s.Next, "\n")
		if got := strings.HasPrefix(next, "go get github.com/openatf/atf"); got != tc.getAtf {
			t.Errorf("go.mod %q: next steps\n%s\nstart with go get of atf: %v, want %v", tc.mod, next, got, tc.getAtf)
		}
		for _, want := range []string{"go test ./functions/workers/greet", "go build -o bin/handlers/greet ./functions/workers/greet", "atf dev --handlers bin/handlers --registry lambdas.json"} {
			if !strings.Contains(next, want) {
				t.Errorf("next steps\n%s\nlack %q", next, want)
			}
		}
	}
	// Neither a module nor a registry: nowhere to scaffold.
	if err := run([]string{"new", "lambda", "greet", "--dir", t.TempDir()}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "go.mod") {
		t.Errorf("a folder without go.mod: %v, want an error naming go.mod", err)
	}
}

// scaffoldGreet runs atf new lambda greet in dir and returns what it printed, with the
// lambdas.json it left and that registry parsed.
func scaffoldGreet(t *testing.T, dir string) (scaffolded, []byte, *registry.Registry) {
	t.Helper()
	var out bytes.Buffer
	if err := run([]string{"new", "lambda", "greet", "--dir", dir, "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var s scaffolded
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || len(s.Files) != 4 {
		t.Fatalf("%v: %s", err, out.String())
	}
	reg, err := os.ReadFile(filepath.Join(dir, "lambdas.json"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Parse(reg)
	if err != nil {
		t.Fatalf("the lambdas.json made: %v\n%s", err, reg)
	}
	return s, reg, r
}
