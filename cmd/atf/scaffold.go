package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/openatf/atf/shared/registry"
)

// atf new lambda NAME scaffolds a Go lambda as the example workers are laid out: its handler in
// functions/workers/NAME (built by make build-handlers for atf dev, and by make build for AWS),
// its entry in lambdas.json, sample tasks in events/workers/NAME, and a test of the handler on
// them that passes. It does so in atf's repository or in a team's own Go module, which imports
// atf's packages as a dependency.

const newUsage = `  atf new lambda NAME [--dir .]
      scaffold a Go lambda in atf's repository, or in a Go module of your own, at --dir: its
      handler (functions/workers/NAME), its entry in lambdas.json (made if there is none),
      sample tasks (events/workers/NAME/tasks.jsonl, for atf schedule --file) and a test of
      the handler on them; then says what to run next
`

// atfModule is the module path of atf, which a scaffolded handler imports.
const atfModule = "github.com/openatf/atf"

// scaffolded is what atf new made.
type scaffolded struct {
	Lambda string   `json:"lambda"`
	Files  []string `json:"files"` // created or changed, relative to the repository
	Next   []string `json:"next"`  // the commands to run next, in --dir
}

func newCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atf new", flag.ContinueOnError)
	dir := fs.String("dir", ".", "the module: the folder of its go.mod and lambdas.json")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "lambda" {
		return errors.New("new takes: lambda NAME")
	}
	s, err := scaffoldLambda(*dir, pos[1])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, s)
	}
	for _, f := range s.Files {
		fmt.Fprintln(out, f)
	}
	fmt.Fprintln(out, "next:")
	for _, n := range s.Next {
		fmt.Fprintln(out, "  "+n)
	}
	return nil
}

// emptyRegistry is the lambdas.json that a module without one starts from.
const emptyRegistry = "{\n  \"lambdas\": []\n}\n"

func scaffoldLambda(dir, name string) (scaffolded, error) {
	regPath := filepath.Join(dir, registry.File)
	mod, modErr := os.ReadFile(filepath.Join(dir, "go.mod"))
	old, err := os.ReadFile(regPath)
	switch {
	case errors.Is(err, os.ErrNotExist) && modErr == nil:
		old = []byte(emptyRegistry) // a module of a team's own: its first lambda
	case err != nil:
		return scaffolded{}, fmt.Errorf("%w: run atf new in a Go module's folder (that of its go.mod), or give --dir", err)
	default:
		reg, err := registry.Parse(old)
		if err != nil {
			return scaffolded{}, err
		}
		if _, taken := reg.Lambda(name); taken {
			return scaffolded{}, fmt.Errorf("lambda %q is in %s already", name, registry.File)
		}
	}
	updated, err := addRegistryEntry(old, fmt.Sprintf(`{"name": %q, "timeout": "1m"}`, name))
	if err != nil {
		return scaffolded{}, err
	}
	if _, err := registry.Parse(updated); err != nil { // the name's rules, among others
		return scaffolded{}, err
	}
	handlerDir := filepath.Join("functions", "workers", name)
	eventsFile := filepath.Join("events", "workers", name, "tasks.jsonl")
	files := map[string]string{
		filepath.Join(handlerDir, "main.go"):      handlerTemplate,
		filepath.Join(handlerDir, "main_test.go"): handlerTestTemplate,
		eventsFile: `{"id": "` + name + `-1", "payload": {"name": "Ada"}}
{"id": "` + name + `-2", "payload": {"name": "Grace"}, "priority": "high"}
`,
	}
	for _, f := range []string{handlerDir, filepath.Dir(eventsFile)} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return scaffolded{}, fmt.Errorf("%s exists already", f)
		}
	}
	s := scaffolded{Lambda: name}
	for _, f := range []string{filepath.Join(handlerDir, "main.go"), filepath.Join(handlerDir, "main_test.go"), eventsFile} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return s, err
		}
		body := strings.ReplaceAll(files[f], "NAME", name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return s, err
		}
		s.Files = append(s.Files, f)
	}
	if err := os.WriteFile(regPath, updated, 0o644); err != nil {
		return s, err
	}
	s.Files = append(s.Files, registry.File)
	s.Next = nextSteps(string(mod), name)
	return s, nil
}

// nextSteps are the commands that test, build and run a lambda scaffolded in the module whose
// go.mod is mod: in atf's repository, make run does the build; a module of a team's own first
// gets atf's packages, unless it requires them already.
func nextSteps(mod, name string) []string {
	test := "go test ./functions/workers/" + name
	schedule := fmt.Sprintf("atf schedule %s --file events/workers/%s/tasks.jsonl", name, name)
	if modulePath(mod) == atfModule {
		return []string{test, "make run", schedule}
	}
	var steps []string
	if !strings.Contains(mod, atfModule+" ") {
		steps = append(steps, "go get "+atfModule+"@latest   (or, from a checkout of atf: go mod edit -replace "+atfModule+"=PATH && go mod tidy)")
	}
	return append(steps, test,
		fmt.Sprintf("go build -o bin/handlers/%s ./functions/workers/%s", name, name),
		"atf dev --handlers bin/handlers --registry lambdas.json", schedule)
}

// modulePath returns the module path a go.mod declares.
func modulePath(mod string) string {
	for _, l := range strings.Split(mod, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	return ""
}

// addRegistryEntry adds entry at the end of the registry's "lambdas" list, keeping the rest of
// the file as it is written.
func addRegistryEntry(reg []byte, entry string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(reg))
	depth, inLambdas := 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: no \"lambdas\" list found: %w", registry.File, err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			continue
		case json.Delim('}'), json.Delim(']'):
			depth--
			if inLambdas && depth == 1 {
				end := int(dec.InputOffset()) - 1 // the list's ']'
				before := bytes.TrimRight(reg[:end], " \t\r\n")
				var b bytes.Buffer
				b.Write(before)
				if before[len(before)-1] == '[' {
					b.WriteString("\n    " + entry + "\n  ")
				} else {
					b.WriteString(",\n    " + entry + "\n  ")
				}
				b.Write(reg[end:])
				return b.Bytes(), nil
			}
			continue
		}
		if key, ok := tok.(string); ok && depth == 1 && key == "lambdas" {
			inLambdas = true
		}
	}
}

const handlerTemplate = `// Command NAME is a lambda: payload {"name": "..."}, result {"greeting": "hello, ..."}. Build
// it and put the binary in an ` + "`atf dev --handlers`" + ` folder; ` + "`make run`" + ` does. Its settings are its
// entry in lambdas.json.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() { workerfn.Main(worker.HandlerFunc(handle)) }

type input struct {
	Name string ` + "`json:\"name\"`" + `
}

type output struct {
	Greeting string ` + "`json:\"greeting\"`" + `
}

// handle runs one task. An error that wraps worker.ErrFatal (worker.Fatal) ends the task
// fatal_failure; any other is retried, up to the lambda's max attempts. Stop when ctx ends.
func handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	var in input
	if err := json.Unmarshal(t.Payload, &in); err != nil || in.Name == "" {
		return nil, worker.Fatal(fmt.Errorf("payload must be {\"name\": \"...\"}, got %s", t.Payload))
	}
	return json.Marshal(output{Greeting: "hello, " + in.Name})
}
`

const handlerTestTemplate = `package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/openatf/atf/shared/worker"
)

// TestSamples: the handler succeeds on each sample task of events/workers/NAME.
func TestSamples(t *testing.T) {
	f, err := os.Open("../../../events/workers/NAME/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var sample struct {
			ID      string          ` + "`json:\"id\"`" + `
			Payload json.RawMessage ` + "`json:\"payload\"`" + `
		}
		if err := json.Unmarshal(sc.Bytes(), &sample); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		out, err := handle(t.Context(), worker.Task{ID: sample.ID, Payload: sample.Payload, Attempt: 1})
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		var got output
		if err := json.Unmarshal(out, &got); err != nil || got.Greeting == "" {
			t.Errorf("line %d: result %s", n, out)
		}
	}
}

// TestBadPayload: a payload the handler cannot read fails the task for good, not retried.
func TestBadPayload(t *testing.T) {
	_, err := handle(t.Context(), worker.Task{ID: "bad", Payload: json.RawMessage(` + "`[1, 2]`" + `), Attempt: 1})
	if !errors.Is(err, worker.ErrFatal) {
		t.Fatalf("err = %v, want a fatal error", err)
	}
}
`
